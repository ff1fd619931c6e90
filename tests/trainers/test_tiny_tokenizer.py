# SPDX-License-Identifier: MIT
"""v05.demos.tiny.make_model writes a tokenizer beside the model, so a
trainer that loads one from the model's directory (verl) can: one token
per character at the ids the model's vocabulary has, its special tokens,
and a chat template."""

import pytest

transformers = pytest.importorskip("transformers")

from v05.demos import tiny  # noqa: E402


def test_model_dir_has_a_tokenizer(tmp_path):
    path = tiny.make_model(str(tmp_path / "m"))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    assert len(tok) == tiny.VOCAB
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == \
        (0, tiny.BOS, 2)
    ids = tok(tiny.CHARS, add_special_tokens=False).input_ids
    assert ids == list(range(3, tiny.VOCAB))
    assert tok.decode(ids) == tiny.CHARS
    chat = tok.apply_chat_template([{"role": "user", "content": "ABC"}],
                                   add_generation_prompt=True, tokenize=False)
    assert chat == "ABC\nA:"
    # Written once: the same directory is taken as it is.
    assert tiny.make_model(path) == path
