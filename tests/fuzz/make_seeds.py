#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/):
valid inputs in each decoder's format, as the encoders of the SDK write them
(frame layout: sdk/include/gossamer/kit/wire.hpp; membership messages:
transports/membership/src/membership_codec.hpp; checkpoints:
sdk/include/gossamer/checkpoint.hpp), and the example configs. Run it again
after a format changes: python3 tests/fuzz/make_seeds.py. Inputs that once
crashed a target are kept beside these (crash-*), not written here."""
import os
import random
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- frames -------------------------------------------------------------------
DATA, BYE, BYE_ACK, PULL, PULL_DONE, TRAILING, HELLO = 1, 2, 3, 4, 5, 6, 7
DTYPE_SIZE = {0: 1, 1: 4, 2: 8, 3: 4, 4: 8}


def frame(kind, dtype, source, op, segment, step, payload, trailer=True):
    count = len(payload) // DTYPE_SIZE[dtype]
    h = struct.pack("<IHBBIBBHQQQII", 0x524D5347, 3, kind, dtype, source, op, 0, segment, step, count,
                    len(payload), 0, 0)
    if kind == TRAILING:
        h = h[:40] + struct.pack("<I", crc32c(h)) + h[44:]
        return h + payload + (struct.pack("<I", crc32c(payload)) if trailer else b"")
    h = h[:40] + struct.pack("<I", crc32c(h + payload)) + h[44:]
    return h + payload


def frames():
    floats = struct.pack("<4f", 1.0, -2.5, 0.0, 3.25)
    write("fuzz_frame", "data-float32", frame(DATA, 1, 2, 4, 0, 7, floats))
    write("fuzz_frame", "data-bytes", frame(DATA, 0, 0, 0, 3, 1, b"hello gossamer"))
    write("fuzz_frame", "data-int64", frame(DATA, 4, 1, 1, 0, 2, struct.pack("<2q", -1, 1 << 40)))
    write("fuzz_frame", "data-empty", frame(DATA, 2, 5, 3, 0, 0, b""))
    write("fuzz_frame", "bye", frame(BYE, 0, 1, 5, 0, 0, b""))
    write("fuzz_frame", "bye-ack", frame(BYE_ACK, 0, 2, 5, 0, 0, b""))
    desc = struct.pack("<QQIIQ", 0x7F0000001000, 4096, 0xDEADBEEF, 4242, 17)
    write("fuzz_frame", "pull", frame(PULL, 0, 3, 4, 1, 9, desc))
    write("fuzz_frame", "pull-done", frame(PULL_DONE, 0, 3, 4, 0, 17, b""))
    hello = struct.pack("<Q", 0x1234567890ABCDEF) + b"tcp://127.0.0.1:40123"
    write("fuzz_frame", "hello", frame(HELLO, 0, 0, 5, 0, 0, hello))
    write("fuzz_frame", "data-trailing", frame(TRAILING, 1, 1, 4, 2, 11, floats))
    write("fuzz_frame", "data-trailing-no-trailer", frame(TRAILING, 1, 1, 4, 2, 11, floats, trailer=False))
    write("fuzz_frame", "header-only", frame(DATA, 1, 2, 4, 0, 7, floats)[:48])


# ---- configs --------------------------------------------------------------------
def configs():
    d = os.path.join(ROOT, "examples", "configs")
    for name in sorted(os.listdir(d)):
        if name.endswith(".yaml"):
            shutil.copyfile(os.path.join(d, name), os.path.join(CORPUS, "fuzz_config", name))
    write("fuzz_config", "overrides",
          "world_size: 4\nalgorithm:\n  name: sgp\n\0training.epochs=1\nmodel.hidden=[64, 32]\n"
          "topology.kind=exponential")
    write("fuzz_config", "flow-map", "{world_size: 2, transport: {kind: inproc}, compression: {kind: topk}}\n")


# ---- store requests ---------------------------------------------------------------
def store():
    write("fuzz_store", "set", b"client-1\0\0set\0rank/0/address\0tcp://127.0.0.1:5555")
    write("fuzz_store", "get", b"client-2\0req-7\0\0get\0rank/3/pull")
    write("fuzz_store", "set-empty-value", b"c\0\0set\0job.ready\0")
    write("fuzz_store", "claim", b"c\0\0claim\0gossamer/join/8\0vm:4242")
    write("fuzz_store", "get-missing-key", b"c\0\0get\0")
    write("fuzz_store", "no-envelope", b"\0set\0k\0v")
    write("fuzz_store", "bad-key", b"c\0\0get\0../etc/passwd")


# ---- certificates -------------------------------------------------------------------
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def certificates():
    rng = random.Random(7)
    key = lambda: "".join(rng.choice(Z85) for _ in range(40))
    head = "# Gossamer CURVE certificate (ZeroMQ layout)\nmetadata\ncurve\n"
    pub, sec = key(), key()
    write("fuzz_certificate", "public", head + '    public-key = "%s"\n' % pub)
    write("fuzz_certificate", "secret",
          "# SECRET: give this file to no one; readable by its owner only.\n" + head +
          '    public-key = "%s"\n    secret-key = "%s"\n' % (pub, sec))
    write("fuzz_certificate", "several-public",
          head + "".join('    public-key = "%s"\n' % key() for _ in range(3)))
    write("fuzz_certificate", "bad-key", head + '    public-key = "short"\n')
    write("fuzz_certificate", "z85-line", key() + "\n")


# ---- membership messages ---------------------------------------------------------------
def membership():
    def msg(kind, view, coord, arg, value, flags, fewest, members=(), previous=-1, skipped=0, incarnation=0):
        b = struct.pack("<IB3sQiiQIIQiI", 0x524D4247, kind, incarnation.to_bytes(3, "little"), view, coord, arg,
                        value, len(members), flags, fewest, previous, skipped)
        return b + b"".join(struct.pack("<i", m) for m in members)

    world = bytes([8 - 1])
    write("fuzz_membership", "heartbeat", world + msg(1, 3, 0, -1, 0, 0, 0))
    write("fuzz_membership", "heartbeat-incarnation", world + msg(1, 3, 0, -1, 0, 0, 0, incarnation=0xC0FFEE))
    write("fuzz_membership", "suspect", world + msg(2, 3, 0, 5, 0, 0, 0))
    write("fuzz_membership", "state", world + msg(3, 3, 0, -1, 120, 1, 0))
    write("fuzz_membership", "state-from-side", world + msg(3, 5, 2, -1, 410, 3, 0))
    write("fuzz_membership", "state-with-joiners", world + msg(3, 5, 2, -1, 410, 0, 0, [6, 7]))
    write("fuzz_membership", "view", world + msg(4, 4, 1, 2, 130, 0, 118, [0, 1, 2, 4, 7], previous=0))
    write("fuzz_membership", "view-skipping", world + msg(4, 9, 0, -1, 300, 0, 300, [0, 1, 2, 3, 4], previous=0,
                                                         skipped=4))
    write("fuzz_membership", "leave", world + msg(5, 4, 1, -1, 0, 0, 0))
    write("fuzz_membership", "join", world + msg(6, 0, -1, -1, 0, 0, 0))


# ---- compressed gradients -------------------------------------------------------------------
def compressors():
    rng = random.Random(11)
    # Top-K: n = 1 + 15 = 16, ratio (1 + 63) / 256 = 0.25, so k = 4; two ranks' payloads.
    shape = bytes([0b11, 15, 63, 0, 0, 0])
    payloads = b""
    for _ in range(2):
        idx = sorted(rng.sample(range(16), 4))
        payloads += struct.pack("<4I", *idx) + struct.pack("<4f", *[rng.uniform(-2, 2) for _ in range(4)])
    write("fuzz_compressors", "topk", shape + payloads)
    # Gaussian-K (byte 0 bit 2): the same wire format and shape, with a zero-valued padding slot.
    write("fuzz_compressors", "gaussk", bytes([0b111]) + shape[1:] + payloads[:-4] + struct.pack("<f", 0.0))
    # QSGD: n = 1 + 19 = 20, levels 1 + 3 = 4 (4 bits per element), bucket 1 + 7 = 8: 3 buckets.
    shape = bytes([0b10, 19, 3, 0, 7, 0])
    n, bits, buckets = 20, 4, 3
    words = (n * bits + 31) // 32
    payload = b""
    for _ in range(3):
        payload += struct.pack("<3f", *[rng.uniform(0, 5) for _ in range(buckets)])
        acc = 0
        for i in range(n):
            acc |= (rng.randint(0, 4) | (rng.randint(0, 1) << (bits - 1))) << (bits * i)
        payload += acc.to_bytes(4 * words, "little")
    write("fuzz_compressors", "qsgd", shape + payload)
    # A2SGD (byte 0 bits 2-3 = 1): n = 1 + 31 = 32, keep_error on; the ranks' average of mu+ and mu-.
    write("fuzz_compressors", "a2sgd", bytes([0b0110, 31, 5, 0, 1, 0]) + struct.pack("<2f", 0.75, 0.5))
    # bf16 (2) and fp16 (3): n = 1 + 4 = 5 elements, padded to 12 bytes.
    write("fuzz_compressors", "bf16", bytes([0b1010, 4, 0, 0, 0, 0]) +
          struct.pack("<6H", 0x3f80, 0xbf00, 0x0001, 0x7f7f, 0x8000, 0))
    write("fuzz_compressors", "fp16", bytes([0b1110, 4, 0, 0, 0, 0]) +
          struct.pack("<6H", 0x3c00, 0xb800, 0x0001, 0x7bff, 0x8000, 0))


# ---- checkpoints ---------------------------------------------------------------------------
def checkpoints():
    sections = {"model": struct.pack("<6f", 0.5, -1, 2, 0, 0.25, 8), "step": struct.pack("<Q", 1200),
                "optimizer/weight": struct.pack("<d", 0.5)}
    body = b"GSMRCKPT" + struct.pack("<II", 1, len(sections))
    for name in sorted(sections):
        body += struct.pack("<I", len(name)) + name.encode() + struct.pack("<Q", len(sections[name]))
        body += sections[name]
    write("fuzz_checkpoint", "three-sections", body + struct.pack("<I", crc32c(body)))
    empty = b"GSMRCKPT" + struct.pack("<II", 1, 0)
    write("fuzz_checkpoint", "empty", empty + struct.pack("<I", crc32c(empty)))


if __name__ == "__main__":
    for t in ["fuzz_frame", "fuzz_config", "fuzz_store", "fuzz_certificate", "fuzz_membership",
              "fuzz_compressors", "fuzz_checkpoint"]:
        os.makedirs(os.path.join(CORPUS, t), exist_ok=True)
    frames()
    configs()
    store()
    certificates()
    membership()
    compressors()
    checkpoints()
