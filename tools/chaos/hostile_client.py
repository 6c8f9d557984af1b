"""A hostile (or badly broken) client of one reftd: malformed, oversized and truncated frames on
the local socket, garbage and half-finished HTTP/2 on the gRPC port, and disconnects in the
middle of all of it. reftd must answer with errors and keep serving everyone else.

Local frames follow proto/local (frame.h): one SOCK_SEQPACKET message per frame, a 24-byte
little-endian header (magic "RFTL", version u16, type u16, flags u32, request_id u32,
payload_length u32, reserved u32) and the payload.
"""
from __future__ import annotations

import os
import random
import socket
import struct
from typing import Dict, List

MAGIC = 0x4C544652
VERSION = 2
HELLO, REGISTER, SNAPSHOT_BEGIN, RESTORE = 1, 3, 5, 11
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HELLO_SEED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fuzz",
                          "corpus", "local_frame_fuzzer", "hello")


def header(msg_type: int, payload_length: int, request_id: int = 1, magic: int = MAGIC,
           version: int = VERSION, flags: int = 0, reserved: int = 0) -> bytes:
    return struct.pack("<IHHIIII", magic, version, msg_type, flags, request_id, payload_length,
                       reserved)


def local_frames(rng: random.Random) -> List[bytes]:
    """Frames no correct client sends: each must be refused without harm."""
    junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))
    return [
        junk,                                               # not even a header
        header(HELLO, 0)[:13],                              # a truncated header
        header(HELLO, 0, magic=0xDEADBEEF),                 # wrong magic
        header(HELLO, 0, version=99),                       # unknown protocol version
        header(999, 0),                                     # unknown message type
        header(HELLO, 0, flags=7, reserved=1),              # undefined flags / reserved bits
        header(HELLO, 1000) + b"short",                     # payload shorter than announced
        header(SNAPSHOT_BEGIN, 4) + b"\0" * 4,              # a request before any hello
        header(HELLO, 0xFFFFFFF0) + junk,                   # absurd announced length
        header(REGISTER, 200_000) + os.urandom(200_000),    # oversized frame (> 64 KiB limit)
    ]


def attack_local_socket(path: str, rng: random.Random) -> Dict[str, int]:
    """Sends every malformed frame on its own connection (a daemon may hang up after the
    first), then a valid hello followed by garbage, cut off mid-session."""
    sent = refused = 0
    for frame in local_frames(rng):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.settimeout(5)
                s.connect(path)
                s.send(frame)
                sent += 1
                try:
                    if not s.recv(65536):
                        refused += 1  # hung up on us: fine
                    else:
                        refused += 1  # an error reply: fine
                except (socket.timeout, OSError):
                    refused += 1
        except OSError:
            refused += 1  # e.g. EMSGSIZE for the oversized frame: the kernel refused it
    if os.path.exists(HELLO_SEED):
        with open(HELLO_SEED, "rb") as f:
            hello = f.read()
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(5)
            s.connect(path)
            s.send(hello)
            try:
                s.recv(65536)
            except OSError:
                pass
            s.send(header(RESTORE, 64) + os.urandom(32))  # payload cut short
            sent += 2
        # closed without a goodbye, in the middle of the session
    return {"frames": sent, "refused": refused}


def attack_grpc_port(host: str, port: int, rng: random.Random) -> int:
    """Garbage, a preface followed by an oversized HTTP/2 frame cut off mid-frame, and bare
    connects; returns the connections made."""
    payloads = [
        os.urandom(rng.randint(1, 4096)),
        HTTP2_PREFACE + struct.pack(">I", 0xFFFFFF)[1:] + b"\x04\x00\x00\x00\x00\x00" + b"\0" * 10,
        HTTP2_PREFACE[:10],
        b"",
    ]
    made = 0
    for p in payloads:
        try:
            with socket.create_connection((host, port), timeout=5) as s:
                made += 1
                if p:
                    s.sendall(p)
        except OSError:
            pass
    return made
