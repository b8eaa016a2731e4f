"""A tiny llama-architecture GGUF model with random weights, written with the ``gguf`` package.

It loads in the real llama-server and generates tokens (nonsense, but real
tokens through the real graph), which is all an inference gate needs. About
0.3 MB; written in well under a second. No pytest import, so scripts can use it.

Shapes: numpy arrays are given in row-major order, the reverse of ggml's ``ne``
(``token_embd`` is ``ne = [n_embd, n_vocab]``, so numpy ``(n_vocab, n_embd)``).
"""

from __future__ import annotations

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
#: A fixed seed: the same file bytes on every run, so every test sees the same tokens.
SEED: Final = 1234

# SentencePiece vocabulary: three control tokens, 256 byte-fallback tokens, then pieces.
_WORDS: Final = ("▁the", "▁is", "▁of", "▁and", "▁to", "in", "er", "an", "on")
_LETTERS: Final = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_PIECES: Final = ("▁", *_LETTERS, *(f"▁{c}" for c in _LETTERS), *_WORDS)
_UNKNOWN, _NORMAL, _CONTROL, _BYTE = 2, 1, 3, 6  # llama.cpp's token types


def write_tiny_llama(path: Path, *, seed: int = SEED) -> Path:
    """Write the tiny model to ``path`` and return it."""
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
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
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

    n_kv = N_EMBD // N_HEAD * N_HEAD_KV
    writer.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    # Control and byte tokens get zero logits, the pieces random ones: greedy decoding
    # then picks pieces, whose text is ASCII. (Random bytes are invalid UTF-8, which
    # llama-server rejects with HTTP 500 "does not match the expected Content-only format".)
    output = weight(n_vocab, N_EMBD)
    output[: 3 + 256] = 0.0
    writer.add_tensor("output.weight", output)
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(n_kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(n_kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
