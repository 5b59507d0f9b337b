#!/usr/bin/env python3
"""SentencePiece tokenizer.model pieces without the sentencepiece package: read
them (for a plain id -> text decoder) and pad a model folder's tokenizer up to
config.json's vocab_size.

Why pad: tools/make_random_model.py copies the tiny test tokenizer (1,200
pieces) into a 103,424-row model, so almost every token the random model picks
has no piece and decodes to "" -- a server then streams nothing per token and
TTFT/ITL cannot be measured. The real ERNIE-4.5 tokenizer covers every id;
padding with unique low-score pieces ("▁w<id>") restores that property. The
added tokens (added_tokens.json) keep their ids as user-defined pieces.

    python3 bench/serving/sp_vocab.py pad MODEL_DIR     # rewrites MODEL_DIR/tokenizer.model in place
"""

import argparse
import json
import os
import struct
import sys

PIECE_NORMAL, PIECE_UNKNOWN, PIECE_CONTROL, PIECE_USER_DEFINED, PIECE_UNUSED, PIECE_BYTE = 1, 2, 3, 4, 5, 6


def _varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError(f"truncated varint at offset {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError(f"varint too long at offset {pos}")


def _fields(buf):
    """(field number, wire type, value) for each top-level field; value is bytes
    for length-delimited fields, int otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError(f"field {number} at offset {pos} runs past the end")
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire} at offset {pos}")
        yield number, wire, value


def read_pieces(path):
    """[(piece text, type)] in id order."""
    with open(path, "rb") as f:
        buf = f.read()
    pieces = []
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 2:
            text, kind = "", PIECE_NORMAL
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    text = v.decode("utf-8", errors="replace")
                elif n == 3 and w == 0:
                    kind = v
            pieces.append((text, kind))
    return pieces


def _encode_varint(value):
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _piece_record(text, score, kind):
    raw = text.encode("utf-8")
    body = b"\x0a" + _encode_varint(len(raw)) + raw + b"\x15" + struct.pack("<f", score) + b"\x18" + \
        _encode_varint(kind)
    return b"\x0a" + _encode_varint(len(body)) + body


def pad_model_dir(folder):
    """Appends pieces to folder/tokenizer.model until it covers config.json's
    vocab_size. Protobuf merges repeated fields wherever they appear, so the
    new records go at the end of the file. Returns (before, after)."""
    with open(os.path.join(folder, "config.json")) as f:
        vocab = int(json.load(f)["vocab_size"])
    added = {}
    added_path = os.path.join(folder, "added_tokens.json")
    if os.path.exists(added_path):
        with open(added_path) as f:
            added = {int(i): t for t, i in json.load(f).items()}
    path = os.path.join(folder, "tokenizer.model")
    pieces = read_pieces(path)
    have = len(pieces)
    if have >= vocab:
        return have, have
    existing = {p for p, _ in pieces}
    records = []
    for i in range(have, vocab):
        if i in added:
            text, kind = added[i], PIECE_USER_DEFINED
        else:
            text, kind = f"\u2581w{i}", PIECE_NORMAL
        if text in existing:
            text, kind = f"\u2581w{i}x", PIECE_NORMAL
        existing.add(text)
        records.append(_piece_record(text, -1.0e6 - i, kind))
    tmp = path + ".tmp"
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        dst.write(src.read())
        dst.write(b"".join(records))
    os.replace(tmp, path)
    return have, vocab


class PieceDecoder:
    """Incremental id -> text for one stream: pieces with '▁' as space, <0xNN>
    byte pieces joined into UTF-8, control pieces dropped, and an incomplete
    UTF-8 tail held back until it completes (as HF and tern do)."""

    def __init__(self, pieces):
        self.table = []
        for text, kind in pieces:
            if kind in (PIECE_CONTROL, PIECE_UNKNOWN, PIECE_UNUSED):
                self.table.append(b"")
            elif kind == PIECE_BYTE or (text.startswith("<0x") and text.endswith(">") and len(text) == 6):
                try:
                    self.table.append(bytes([int(text[3:5], 16)]))
                except ValueError:
                    self.table.append(text.encode())
            else:
                self.table.append(text.replace("\u2581", " ").encode("utf-8"))

    def stream(self):
        return _DecodeStream(self.table)


class _DecodeStream:
    def __init__(self, table):
        self.table = table
        self.pending = b""

    def push(self, token_id):
        raw = self.table[token_id] if 0 <= token_id < len(self.table) else b""
        data = self.pending + raw
        # Hold back at most 3 bytes of an unfinished UTF-8 sequence.
        for cut in range(len(data), max(len(data) - 4, -1), -1):
            try:
                text = data[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
            self.pending = data[cut:]
            return text
        self.pending = b""
        return data.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pad", help="pad MODEL_DIR/tokenizer.model to config.json's vocab_size")
    p.add_argument("model_dir")
    args = ap.parse_args()
    before, after = pad_model_dir(args.model_dir)
    if before == after:
        print(f"{args.model_dir}: tokenizer already has {before} pieces", file=sys.stderr)
    else:
        print(f"{args.model_dir}: tokenizer padded from {before} to {after} pieces", file=sys.stderr)


if __name__ == "__main__":
    main()
