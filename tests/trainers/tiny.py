# SPDX-License-Identifier: MIT
"""A tokenizer and a model made here (no hub): byte-level BPE without merges
(one token per byte, so any text round-trips) and a random-init tiny Llama."""
import os


def tokenizer(path):
    """A PreTrainedTokenizerFast saved in `path` (and returned)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in ("<pad>", "<eos>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                   eos_token="<eos>")
    os.makedirs(path, exist_ok=True)
    fast.save_pretrained(path)
    return fast


def llama(path, vocab_size, seed=0):
    """A 2-layer Llama with random weights saved in `path` (and returned)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32,
                      intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path)
    return model
