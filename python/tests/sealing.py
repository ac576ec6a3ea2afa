"""An independent implementation of the rule that seals every state
(shardkit/base/json.h "Sealed states", shardkit/base/hash.h Hasher): the
checksum is Hasher(0x736b2d73756d0003).AddBytes(json.dumps(body)), body = the
state without "checksum", in its order. Tests use it as an oracle of the rule
and to make a well-sealed state with a hostile value (what only the checks
behind the seal can refuse)."""

import json

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
CHECKSUM_DOMAIN = 0x736B2D73756D0003  # "sk-sum"


def _mix(z):
    z = (z + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _checksum(text: str) -> str:
    # Hasher(domain).AddBytes(text).Finish(): four lanes, words little-endian.
    d = CHECKSUM_DOMAIN
    lanes = [d, ~d & M64, d ^ 0x243F6A8885A308D3, d ^ 0x13198A2E03707344]
    words = [len(text.encode())]
    data = text.encode()
    full = len(data) // 8 * 8
    words += [int.from_bytes(data[i : i + 8], "little") for i in range(0, full, 8)]
    words.append(int.from_bytes(data[full:].ljust(8, b"\0"), "little"))
    for i, w in enumerate(words):
        lanes[i & 3] = _mix(lanes[i & 3] ^ ((w + GOLDEN) & M64))
    h = _mix(len(words))
    for lane in lanes:
        h = _mix(h ^ lane)
    return f"{h:016x}"


def reseal(state: dict) -> dict:
    body = {k: v for k, v in state.items() if k != "checksum"}
    return dict(body, checksum=_checksum(json.dumps(body)))
