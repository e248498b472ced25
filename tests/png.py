"""Reading the PNG screenshots headless Chromium writes, in the tests that look at their pixels (the report's and
the live page's widths, the kept screenshots): one decoder, every byte of the file checked."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from tests.screenshots import PNG_SIGNATURE


def read_png(path: Path, max_rows: int | None = None) -> tuple[int, int, int, list[bytes]]:
    """Width, height, bytes per pixel and the first ``max_rows`` (default: all) unfiltered RGB(A) rows of an 8-bit
    non-interlaced PNG (all of it checked: signature, chunk CRCs, IHDR first, IEND last, the pixel data's length)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, data[:8]
    pos, idat, width, height, bpp, chunks = 8, b"", 0, 0, 0, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + n]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])[0], kind
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND"
    raw, stride, prev, rows = zlib.decompress(idat), width * bpp, bytearray(width * bpp), []
    assert len(raw) == height * (stride + 1)
    for r in range(height if max_rows is None else min(height, max_rows)):
        f, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1 : (r + 1) * (stride + 1)])
        assert f <= 4, f
        if f == 2:
            line = bytearray((x + b) & 255 for x, b in zip(line, prev, strict=True))
        elif f:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                if f == 1:
                    line[i] = (line[i] + a) & 255
                    continue
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                if f == 3:
                    line[i] = (line[i] + ((a + b) >> 1)) & 255
                    continue
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows
