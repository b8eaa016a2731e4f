"""A tiny llama-architecture GGUF model with random weights, written with the ``gguf`` package.

It loads in the real llama-server and generates tokens (nonsense, but real
tokens through the real graph), which is all an inference gate needs. About
0.3 MB; written in well under a second. No pytest import, so scripts can use it.

Shapes: numpy arrays are given in row-major order, the reverse of ggml's ``ne``
(``token_embd`` is ``ne = [n_embd, n_vocab]``, so numpy ``(n_vocab, n_embd)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: Small enough to write and load in a blink, large enough that a 4-layer graph
#: with grouped-query attention exercises the same kernels a real model does.
N_EMBD: Final = 64
N_HEAD: Final = 4
N_HEAD_KV: Final = 2
N_FF: Final = 128
N_LAYER: Final = 4
N_CTX: Final = 512


@dataclass(frozen=True)
class ModelShape:
    """A llama model's dimensions."""

    n_embd: int = N_EMBD
    n_head: int = N_HEAD
    n_head_kv: int = N_HEAD_KV
    n_ff: int = N_FF
    n_layer: int = N_LAYER


TINY: Final = ModelShape()
#: ~100 MB of f32 weights, every one read for each token: on a CPU a token takes milliseconds of
#: arithmetic and memory traffic, like a real model's, where the tiny one's ~1 ms is mostly the
#: threads waiting on each other (scripts/bench_gate.py --model small).
SMALL: Final = ModelShape(n_embd=512, n_head=8, n_head_kv=4, n_ff=1536, n_layer=8)

#: A fixed seed: the same file bytes on every run, so every test sees the same tokens.
SEED: Final = 1234

# SentencePiece vocabulary: three control tokens, 256 byte-fallback tokens, then pieces.
_WORDS: Final = ("▁the", "▁is", "▁of", "▁and", "▁to", "in", "er", "an", "on")
_LETTERS: Final = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_PIECES: Final = ("▁", *_LETTERS, *(f"▁{c}" for c in _LETTERS), *_WORDS)
_UNKNOWN, _NORMAL, _CONTROL, _BYTE = 2, 1, 3, 6  # llama.cpp's token types


def write_tiny_llama(path: Path, *, seed: int = SEED, shape: ModelShape = TINY) -> Path:
    """Write the tiny model (or one of another ``shape``) to ``path`` and return it."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *_PIECES]
    types = [_UNKNOWN, _CONTROL, _CONTROL, *([_BYTE] * 256), *([_NORMAL] * len(_PIECES))]
    scores = [0.0, 0.0, 0.0, *([0.0] * 256), *(-float(i) for i in range(len(_PIECES)))]
    n_vocab = len(tokens)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama-test")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
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

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    n_kv = shape.n_embd // shape.n_head * shape.n_head_kv
    writer.add_tensor("token_embd.weight", weight(n_vocab, shape.n_embd))
    writer.add_tensor("output_norm.weight", np.ones(shape.n_embd, dtype=np.float32))
    # Control and byte tokens get zero logits, the pieces random ones: greedy decoding
    # then picks pieces, whose text is ASCII. (Random bytes are invalid UTF-8, which
    # llama-server rejects with HTTP 500 "does not match the expected Content-only format".)
    output = weight(n_vocab, shape.n_embd)
    output[: 3 + 256] = 0.0
    writer.add_tensor("output.weight", output)
    for i in range(shape.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(shape.n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(shape.n_embd, shape.n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(n_kv, shape.n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(n_kv, shape.n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(shape.n_embd, shape.n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(shape.n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(shape.n_ff, shape.n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(shape.n_ff, shape.n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(shape.n_embd, shape.n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
