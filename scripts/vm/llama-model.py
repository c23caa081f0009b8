#!/usr/bin/env python3
"""Writes a small llama-architecture GGUF with random weights from a fixed seed.

Usage: llama-model.py OUT.gguf [--seed N] [--layers N] [--width N] [--heads N] [--ff N]

Run by scripts/vm/llama-root.sh with PYTHONPATH naming an unpacked python3-gguf and
python3-numpy (Debian packages, nothing installed). The model is for the guest's
llama-server (tests/vm/llama_server.sh): what llama.cpp does with its KV cache (one stream
per slot, a row per cell, per layer K and V) depends on the shapes below, never on the
weights, which only decide which tokens come out; at temperature 0 those are deterministic
noise. Tokenizer: "llama" (SentencePiece) with <unk>, <s>, </s> and the 256 byte tokens,
so any text is tokenized byte by byte.
"""
import argparse
import sys

try:
    import gguf
    import numpy as np
except ImportError as e:
    sys.exit(f"llama-model: {e}: run with PYTHONPATH naming python3-gguf's and python3-numpy's "
             "dist-packages (scripts/vm/llama-root.sh does)")


def main() -> None:
    ap = argparse.ArgumentParser(description="random-weight llama GGUF for the guest's llama-server")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=512)
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--scale", type=float, default=0.2)  # outputs vary token to token
    a = ap.parse_args()
    if a.width % a.heads:
        sys.exit(f"llama-model: --width {a.width} is not a multiple of --heads {a.heads}")
    rng = np.random.default_rng(a.seed)

    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{b:02X}>".encode() for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    vocab = len(tokens)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("kvtier-random-llama")
    w.add_context_length(a.context)
    w.add_embedding_length(a.width)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.heads)  # no GQA: K and V rows are as wide as the model
    w.add_rope_dimension_count(a.width // a.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def weight(rows: int, cols: int) -> "np.ndarray":
        # numpy's (rows, cols) is ggml's ne = [cols, rows].
        return (rng.standard_normal((rows, cols)) * a.scale).astype(np.float32)

    ones = np.ones(a.width, dtype=np.float32)
    w.add_tensor("token_embd.weight", weight(vocab, a.width))
    for i in range(a.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + t + ".weight", weight(a.width, a.width))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", weight(a.ff, a.width))
        w.add_tensor(p + "ffn_up.weight", weight(a.ff, a.width))
        w.add_tensor(p + "ffn_down.weight", weight(a.width, a.ff))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", weight(vocab, a.width))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
