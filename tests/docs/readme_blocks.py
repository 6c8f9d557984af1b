"""Finds the fenced code blocks of a Markdown file and the `readme-test` marker before each.

Pure text processing, no execution: `parse(text)` returns one `Block` per fenced block, in
order. The marker grammar is documented in test_readme.py, which runs the blocks.
"""

import dataclasses
import re

DEFAULT_TIMEOUT_S = 300

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_MARKER = re.compile(r"^\s*<!--\s*readme-test:(.*?)-->\s*$")
_TIMEOUT = re.compile(r"(?:^|\s)timeout=(\S*)")
_LANGUAGES = {"python": "python", "py": "python", "python3": "python",
              "sh": "sh", "bash": "sh", "shell": "sh", "console": "sh", "": "sh"}


@dataclasses.dataclass
class Block:
    line: int            # 1-based line of the opening fence
    info: str            # the fence's info string, first word ("python", "", ...); "marker"
                         # for a marker that no block follows
    code: str            # what runs: the block's text (console: the "$ " lines, prompt cut)
    action: str = ""     # "run", "xfail", "skip"; "" when the block cannot be run (see error)
    language: str = ""   # "sh" or "python" for blocks that run
    reason: str = ""     # xfail / skip reason
    timeout_s: int = DEFAULT_TIMEOUT_S
    error: str = ""      # why the marker (or its absence) is wrong; the test fails with it

    @property
    def id(self):
        return f"readme-L{self.line}-{self.language or _LANGUAGES.get(self.info, self.info)}"


def _console_commands(lines):
    return [line[2:] for line in lines if line.startswith("$ ")]


def _apply_marker(block, marker):
    """Fills block.action/language/reason/timeout_s from the marker's text, or block.error."""
    words = marker.split()
    if not words or words[0] not in ("run", "xfail", "skip"):
        block.error = f"unknown marker <!-- readme-test:{marker}-->: use run, xfail or skip"
        return
    block.action, rest = words[0], marker.strip()[len(words[0]):]
    timeouts = _TIMEOUT.findall(rest)
    rest = _TIMEOUT.sub(" ", rest).strip()
    if timeouts:
        if len(timeouts) > 1 or not timeouts[0].isdigit() or int(timeouts[0]) <= 0:
            block.error = f"bad timeout in marker: {marker.strip()!r} (one timeout=SECONDS)"
            return
        block.timeout_s = int(timeouts[0])
    if block.action == "run":
        if rest not in ("", "python", "sh"):
            block.error = f"'run' takes only 'python' or 'sh' and timeout=N, not {rest!r}"
            return
        if rest:
            block.language = rest
    else:
        if not rest:
            block.error = (f"'{block.action}' needs a reason: "
                           f"<!-- readme-test: {block.action} WHY -->")
            return
        block.reason = rest
    if not block.language:
        block.language = _LANGUAGES.get(block.info, "")
    if not block.language and block.action != "skip":
        block.error = (f"cannot run a '{block.info}' block: mark it 'run python' or 'run sh', "
                       "or skip it")


def _dangling(line):
    return Block(line, "marker", "", error="marker not followed by a fenced block")


def _read_block(lines, i, fence, marker):
    """The block whose opening fence is lines[i]; returns it and the index after its close."""
    indent, ticks, info = fence.groups()
    closing = re.compile(r"^ {0,3}" + re.escape(ticks[0]) + "{%d,}\\s*$" % len(ticks))
    body = []
    j = i + 1
    while j < len(lines) and not closing.match(lines[j]):
        body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
        j += 1
    word = info.strip().split()[0].lower() if info.strip() else ""
    code = "\n".join(_console_commands(body) if word == "console" else body) + "\n"
    block = Block(i + 1, word, code)
    if j == len(lines):
        block.error = "fenced block is never closed"
    elif marker is not None:
        _apply_marker(block, marker)
    else:
        block.error = ("fenced block has no marker: put <!-- readme-test: run|run python|"
                       "xfail REASON|skip REASON --> on the line before it")
    return block, j + 1


def parse(text):
    """Returns the fenced blocks of `text` with their markers applied (see Block)."""
    blocks = []
    lines = text.split("\n")
    pending = None  # (line number, marker text) of a marker waiting for its block
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        marker = _MARKER.match(lines[i])
        if fence:
            block, i = _read_block(lines, i, fence, pending and pending[1])
            blocks.append(block)
            pending = None
            continue
        if pending and (marker or lines[i].strip()):
            blocks.append(_dangling(pending[0]))
            pending = None
        if marker:
            pending = (i + 1, marker.group(1))
        i += 1
    if pending:
        blocks.append(_dangling(pending[0]))
    return blocks
