"""Staging CUDA/ROCm tensors through torch, for a libreft built without that backend.

libreft cannot touch device memory then, but torch can: each staged tensor gets a pinned host
mirror that libreft registers as host memory. snapshot() queues, on a side stream that waits
for the trainer's current stream (no device synchronisation), the device->host copies into the
mirrors and then one copy that writes a sequence number into a pinned host word; libreft's copy
worker waits for that word (Client.gate_host_copies) before it reads the mirrors. restore()
copies the mirrors back. Costs: a pinned host copy of every staged tensor, and a host copy
more than the backend's pull.
"""


def _bytes(t):
    import torch
    return t.reshape(-1).view(torch.uint8)


class TorchStager:
    def __init__(self):
        import torch
        self._torch = torch
        self._buffers = {}  # device index -> [(tensor, mirror)]
        self._side = {}     # device index -> side stream
        self._device_word = {}
        self._word = torch.zeros(1, dtype=torch.int64, pin_memory=True)
        self._seq = 0

    def mirror(self, tensor):
        """A pinned host buffer the size of `tensor` (register it as host memory, then add())."""
        return self._torch.empty(tensor.numel() * tensor.element_size(), dtype=self._torch.uint8,
                                 pin_memory=True)

    def add(self, tensor, mirror):
        device = tensor.device.index
        if device not in self._side:
            with self._torch.cuda.device(device):
                self._side[device] = self._torch.cuda.Stream(device)
                self._device_word[device] = self._torch.zeros(1, dtype=self._torch.int64,
                                                              device=tensor.device)
        self._buffers.setdefault(device, []).append((tensor, mirror))

    def stage(self, client):
        """Queues this snapshot's copies and gates libreft's copy worker on them."""
        torch = self._torch
        self._seq += 1
        previous = None
        for device, pairs in self._buffers.items():
            side = self._side[device]
            side.wait_stream(torch.cuda.current_stream(device))  # after the trainer's work
            with torch.cuda.device(device), torch.cuda.stream(side):
                if previous is not None:
                    side.wait_stream(previous)  # the word below follows every device's copies
                for tensor, mirror in pairs:
                    mirror.copy_(_bytes(tensor), non_blocking=True)
            previous = side
        with torch.cuda.device(device), torch.cuda.stream(previous):
            word = self._device_word[device]
            word.fill_(self._seq)
            self._word.copy_(word, non_blocking=True)
        client.gate_host_copies(self._word.data_ptr(), self._seq)

    def unstage(self):
        """After a restore filled the mirrors: copies them into the tensors (on each device's
        current stream; returns when done)."""
        for pairs in self._buffers.values():
            for tensor, mirror in pairs:
                _bytes(tensor).copy_(mirror)
