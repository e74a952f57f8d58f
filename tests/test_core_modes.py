"""Mode specs, detection (docs/method.md "Mode detection"), gammas from caps and crossovers (paper
Table 1)."""

import math

import pytest

from routing_grpo.core.modes import (
    DEFAULT_MODES,
    INVALID,
    Detection,
    ModeDetector,
    ModeSpec,
    crossovers,
    gammas_from_caps,
    mode_index,
    parse_modes,
    routing_instruction,
    word_pattern,
    word_token_id_forms,
)


class PieceTokenizer:
    """A tokenizer over a fixed list of pieces (greedy longest match), so tests control the ids.

    As in real BPE vocabularies, "Short" and " Short" are different tokens, and "NoThink" takes two.
    """

    PIECES = [
        " Short",
        "Short",
        " Long",
        "Long",
        "No",
        "Think",
        " ",
        "I",
        " need",
        "x",
        "\\boxed{4}",
        "Sh",
        "ort",
    ]

    def encode(self, text, add_special_tokens=False):
        ids, i = [], 0
        while i < len(text):
            best = max((p for p in self.PIECES if text.startswith(p, i)), key=len, default=None)
            if best is None:
                raise ValueError(f"cannot tokenize {text[i:]!r}")
            ids.append(self.PIECES.index(best))
            i += len(best)
        return ids

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.PIECES[i] for i in ids)


@pytest.fixture
def tok():
    return PieceTokenizer()


@pytest.fixture
def detector(tok):
    return ModeDetector.from_tokenizer(DEFAULT_MODES, tok)


def test_paper_defaults():
    assert [m.name for m in DEFAULT_MODES] == ["NoThink", "Short", "Long"]
    assert [m.base for m in DEFAULT_MODES] == [1.3, 1.2, 1.0]
    assert [m.gamma for m in DEFAULT_MODES] == [0.99984, 0.99994, 1.0]
    assert [m.cap for m in DEFAULT_MODES] == [1024, 3000, None]


def test_routing_instruction_is_the_papers_sentence():
    assert routing_instruction(DEFAULT_MODES) == (
        "Output NoThink to answer directly, Short for brief reasoning, or Long for extended reasoning."
    )
    two = parse_modes(
        [{"name": "Short", "base": 1.2, "gamma": 0.9999}, {"name": "Long", "base": 1, "gamma": 1}]
    )
    assert routing_instruction(two) == "Output Short for brief reasoning or Long for extended reasoning."
    # The instruction follows the configured words.
    renamed = parse_modes(
        [
            {"name": "Fast", "word": "Quick", "base": 1.1, "gamma": 0.999},
            {"name": "Slow", "base": 1, "gamma": 1},
        ]
    )
    assert "Quick for brief reasoning" in routing_instruction(renamed)


def test_word_token_forms_differ_with_leading_space(tok):
    assert word_token_id_forms(tok, "Short") == [[1], [0]]
    assert word_token_id_forms(tok, "NoThink") == [[4, 5], [6, 4, 5]]


@pytest.mark.parametrize(
    ("text", "mode", "word_tokens"),
    [
        ("Short x", 1, 1),  # exact ids, no space
        (" Short x", 1, 1),  # exact ids, leading-space form
        ("NoThink\\boxed{4}", 0, 2),  # a two-token word
        (" NoThink x", 0, 3),
        ("LongI need", 2, 1),  # no trailing word boundary: "LongI need" is Long
        ("Short", 1, 1),
    ],
)
def test_detect_by_token_ids(detector, tok, text, mode, word_tokens):
    det = detector.detect(tok.encode(text))
    assert (det.mode, det.word_tokens) == (mode, word_tokens)


def test_detect_falls_back_to_the_prefix_regex_and_counts_word_tokens(detector, tok):
    # "Sh" + "ort" is not the word's id sequence; the regex on the decoded text still reads Short, and
    # the word spans the first two tokens, so L starts after them.
    ids = tok.encode("Sh") + tok.encode("ort") + tok.encode(" need")
    det = detector.detect(ids)
    assert (det.mode, det.word_tokens) == (1, 2)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("NoThink", 0),
        ("no think. The answer", 0),
        ("NO_THINK", 0),
        ("no-think", 0),
        ("NOTHINK", 0),
        ("  \n short", 1),
        ("SHORTly", 1),
        ("longer", 2),
        ("Long", 2),
        ("", INVALID),
        ("The answer is Long", INVALID),  # the word must come first
        ("Mode: Short", INVALID),
        ("Nothing", INVALID),
        ("N", INVALID),
        ("Sho", INVALID),
    ],
)
def test_detect_text_variants(detector, text, mode):
    assert detector.detect([], text) == Detection(mode, 0)


def test_detection_without_tokenizer_uses_given_text():
    det = ModeDetector(DEFAULT_MODES).detect([101, 102], text="short answer")
    assert det.mode == 1
    assert ModeDetector(DEFAULT_MODES).detect([101]).mode == INVALID


def test_word_pattern_splits_camel_case():
    assert word_pattern("NoThink") == "No[ _\\-]?Think"
    assert word_pattern("Short") == "Short"


def test_mode_spec_validation():
    with pytest.raises(ValueError, match="gamma"):
        ModeSpec("A", "A", 1.0, 1.5)
    with pytest.raises(ValueError, match="gamma"):
        ModeSpec("A", "A", 1.0, 0.0)
    with pytest.raises(ValueError, match="cap"):
        ModeSpec("A", "A", 1.0, 1.0, cap=0)
    with pytest.raises(ValueError, match="base"):
        ModeSpec("A", "A", float("nan"), 1.0)
    with pytest.raises(ValueError, match="whitespace"):
        ModeSpec("A", " A", 1.0, 1.0)


def test_parse_modes_errors_name_the_key():
    with pytest.raises(ValueError, match=r"modes\[0\]: unknown key\(s\) \['bse'\]"):
        parse_modes([{"name": "A", "bse": 1.0, "base": 1.0, "gamma": 1.0}])
    with pytest.raises(ValueError, match=r"modes\[1\]: missing key\(s\) \['gamma'\]"):
        parse_modes([{"name": "A", "base": 1.0, "gamma": 1.0}, {"name": "B", "base": 1.0}])
    with pytest.raises(ValueError, match="prefix"):
        parse_modes([{"name": "Long", "base": 1, "gamma": 1}, {"name": "Longer", "base": 1, "gamma": 1}])
    with pytest.raises(ValueError, match="same routing word"):
        # Separators and case do not make words distinct for detection.
        parse_modes(
            [
                {"name": "A", "word": "No_Think", "base": 1, "gamma": 1},
                {"name": "B", "word": "nothink", "base": 1, "gamma": 1},
            ]
        )
    with pytest.raises(ValueError, match="distinct"):
        parse_modes(
            [
                {"name": "A", "word": "X", "base": 1, "gamma": 1},
                {"name": "A", "word": "Y", "base": 1, "gamma": 1},
            ]
        )
    with pytest.raises(ValueError, match="numbers"):
        parse_modes([{"name": "A", "base": "high", "gamma": 1}])
    assert parse_modes([{"name": "A", "base": 1, "gamma": 1}])[0].word == "A"


def test_mode_index():
    assert mode_index(DEFAULT_MODES, "short") == 1
    with pytest.raises(ValueError, match="unknown mode 'Medium'"):
        mode_index(DEFAULT_MODES, "Medium")


def test_gammas_from_caps_put_crossovers_at_the_caps():
    gammas = gammas_from_caps([1.3, 1.2, 1.0], [1024, 3000, None])
    assert gammas[2] == 1.0
    assert gammas[1] == pytest.approx(0.99994, abs=1e-6)
    assert gammas[0] == pytest.approx(0.99986, abs=1e-5)
    modes = [
        ModeSpec(n, n, b, g, c) for n, b, g, c in zip("ABC", [1.3, 1.2, 1.0], gammas, [1024, 3000, None])
    ]
    # Derived gammas: NoThink/Short crossover exactly at 1024 (docs/method.md "Modes"), Short/Long at 3000.
    assert [round(c.length, 6) for c in crossovers(modes)] == [1024.0, 3000.0]
    with pytest.raises(ValueError, match="needs a cap"):
        gammas_from_caps([1.3, 1.0], [None, None])


def test_crossovers_of_the_recipe_gammas_match_the_paper():
    found = crossovers(DEFAULT_MODES)
    assert [(c.from_mode, c.to_mode) for c in found] == [("NoThink", "Short"), ("Short", "Long")]
    assert found[0].length == pytest.approx(800, abs=1)  # paper: ~800
    assert found[1].length == pytest.approx(3000, rel=0.02)  # paper: ~3000 (3038.6 exactly)
    # At each crossover the two modes tie.
    for c in found:
        a, b = (DEFAULT_MODES[mode_index(DEFAULT_MODES, n)] for n in (c.from_mode, c.to_mode))
        assert math.isclose(a.reward(c.length), b.reward(c.length), rel_tol=1e-9)


def test_crossovers_skip_dominated_modes():
    # Middle mode never optimal: the envelope goes straight from A to C.
    modes = [
        ModeSpec("A", "A", 2.0, 0.999),
        ModeSpec("B", "B", 1.0, 0.9995),
        ModeSpec("C", "C", 1.5, 1.0),
    ]
    found = crossovers(modes)
    assert [(c.from_mode, c.to_mode) for c in found] == [("A", "C")]
    assert found[0].length == pytest.approx(math.log(2 / 1.5) / -math.log(0.999))
    assert crossovers([ModeSpec("L", "L", 1.0, 1.0)]) == []
