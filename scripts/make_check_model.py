"""Write the compute check's model: a tiny llama GGUF whose greedy answer is known in advance.

Run once; the file is committed beside the code that pins its sha256
(``llama_runtime/updater/verify/compute.py``) and shipped in the package::

    python scripts/make_check_model.py llama_runtime/updater/verify/check-model.gguf

The model is built so that every correct backend answers the same, whatever its float order:
each letter token embeds as a one-hot vector (``a``/``A``/``▁a`` share one), every other token
as a shared "not a letter" direction, and the output matrix maps the direction of a letter to
the next letter (``z`` to ``a``) and "not a letter" to ``a``. The transformer blocks carry small
random weights, so a real graph runs (matrix products in f16, attention, RoPE, RMS norm, SiLU)
and a broken kernel (NaN, garbage) changes the answer, while the winning logit leads every other
by a margin of about 30. The gate's prompt ends in ``,``, so the greedy answer of 16 tokens is
``abcdefghijklmnop``.

Needs the ``gguf`` and ``numpy`` packages (the test extra has both).
"""

from __future__ import annotations

import argparse
import hashlib
import string
from pathlib import Path
from typing import Final

N_EMBD: Final = 64
N_HEAD: Final = 4
N_HEAD_KV: Final = 2
N_FF: Final = 128
N_LAYER: Final = 2
N_CTX: Final = 256
#: A fixed seed: the same bytes on every run with the same gguf package.
SEED: Final = 20261204
#: The dimension that says "not a letter" (letters use 0..25).
OTHER: Final = N_EMBD - 1
#: Output weight of the successor's logit: x/rms(x) of a one-hot vector is 8 on its dimension, so
#: the winner's logit is about 32 against the others' ~1.
GAIN: Final = 4.0
#: Scale of the blocks' random weights: they move the residual stream by a few hundredths.
BLOCK_SCALE: Final = 0.02

_WORDS: Final = ("▁the", "▁is", "▁of", "▁and", "▁to", "in", "er", "an", "on")
_LETTERS: Final = string.ascii_lowercase + string.ascii_uppercase
_PIECES: Final = ("▁", *_LETTERS, *(f"▁{c}" for c in _LETTERS), *_WORDS)
_UNKNOWN, _NORMAL, _CONTROL, _BYTE = 2, 1, 3, 6  # llama.cpp's token types


def _letter(piece: str) -> int | None:
    """The letter index (0..25) a piece stands for, or None."""
    text = piece.removeprefix("▁")
    return string.ascii_lowercase.index(text.lower()) if len(text) == 1 and text.isalpha() else None


def write_check_model(path: Path) -> str:
    """Write the model to ``path``; returns its sha256."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(SEED)
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *_PIECES]
    types = [_UNKNOWN, _CONTROL, _CONTROL, *([_BYTE] * 256), *([_NORMAL] * len(_PIECES))]
    scores = [0.0, 0.0, 0.0, *([0.0] * 256), *(-float(i) for i in range(len(_PIECES)))]
    n_vocab = len(tokens)

    embed = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    output = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    for index, token in enumerate(tokens):
        letter = _letter(token)
        embed[index, OTHER if letter is None else letter] = 1.0
    for index, token in enumerate(tokens):
        letter = _letter(token)
        if letter is None or token.startswith("▁") or token.isupper():
            continue  # only the bare lower-case letters are ever the answer
        output[index, (letter - 1) % 26] = GAIN
        if letter == 0:
            output[index, OTHER] = GAIN

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("llama-runtime-compute-check")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)

    def block(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * BLOCK_SCALE).astype(np.float16)

    n_kv = N_EMBD // N_HEAD * N_HEAD_KV
    writer.add_tensor("token_embd.weight", embed.astype(np.float16))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", output.astype(np.float16))
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", block(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_k.weight", block(n_kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_v.weight", block(n_kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_output.weight", block(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", block(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", block(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", block(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    """Write the model where the first argument says and print its size and sha256."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", type=Path)
    args = parser.parse_args()
    digest = write_check_model(args.path)
    print(f"{args.path}: {args.path.stat().st_size} bytes, sha256 {digest}")


if __name__ == "__main__":
    main()
