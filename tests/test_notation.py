"""The notation linter: a letter the glossary reserves is not used with another meaning.

The glossary's notation table (book/glossary.md) gives one meaning per letter across the three modules.
For the letters that drifted most (β, s, C, P) each entry below lists a few patterns of the *other*
meaning — the forms in which it was written — and the test scans every lesson's markdown and every book
page for them. A pattern is a regular expression over the markdown source (maths written in LaTeX).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted(ROOT.glob("solutions/*/*.ipynb"))
PAGES = sorted(p for p in ROOT.glob("book/**/*.md") if "node_modules" not in p.parts and p.name != "glossary.md")
# the glossary names the other meanings to rule them out ("never β"), so it is the one page not scanned

SEP = r"(?:\s|\\[,;:!]|\\,)*"  # thin spaces and blanks between factors of a product
RESERVED: dict[str, tuple[str, list[str]]] = {
    "beta": ("β is the link's bandwidth (β₁, β₂ Adam's decays); bytes per element are b", [
        r"\\beta" + SEP + r"\\ge" + SEP + r"1",                      # "int β ≥ 1" bytes per element
        r"\\beta" + SEP + r"\\Psi",                                   # "β Ψ" bytes of a model
        r"\\beta" + SEP + r"\\in" + SEP + r"\\\{" + SEP + r"2",       # "β ∈ {2, 4, 8}"
        r"itemsize" + SEP + r"\$\\beta",                              # "itemsize β"
        r"\\beta" + SEP + r"[nr]" + SEP + r"(?:w|\\sum)",             # "β n w", "β r w": bytes of activations
        r"P\\Big\(.*?,\s*\\beta\\Big\)",                              # "P(r, s, β)": a byte count's argument
    ]),
    "s": ("s is the loss scale; a ZeRO shard's length is Ψ_N", [
        r"(?<![\\A-Za-z])s" + SEP + r"=" + SEP + r"\\(?:left)?\\?lceil" + SEP + r"(?:\\frac\{)?\\Psi",  # s = ⌈Ψ/N⌉
        r"\[" + SEP + r"k" + SEP + r"s" + SEP + r",",                 # S_k = [ks, (k+1)s)
        r"_\{\((?:N" + SEP + r")?s\)\}",                              # shapes (s) and (Ns) under a brace
        r"\bN" + SEP + r"s" + SEP + r"-" + SEP + r"\\Psi",            # padding Ns − Ψ
    ]),
    "C": ("C is the client fraction; the number of classes is J", [
        r"\$C\$\s*=\s*`n_classes`",                                    # "C = `n_classes`"
        r"\$C\$ classes",
        r"\\frac\s*1\s*C\b|\\frac\s*n\s*C\b|(?<![\w\\])1\s*/\s*C\b",   # class shares 1/C, n/C
        r"K" + SEP + r"\\(?:times|cdot)" + SEP + r"C\b",               # a K × C count table
        r"_\{\([^()]*\bC\)\}",                                         # (B, C) or (C) shapes under a brace
        r"\\ln" + SEP + r"C\b|\blog C\b|\\log" + SEP + r"C\b",               # the uniform loss ln C, log C
        r"(?<![\w\\])C" + SEP + r"\\ge" + SEP + r"2\b",                # "C ≥ 2" classes
        r"`counts: \(K, C\)`",
    ]),
    "P": ("P is a model's parameter tensors; a count of parameters is Ψ", [
        r"\\mathbb R\^\{?P\b",                                         # w ∈ R^P
        r"_\{\(P\)\}",                                                 # (P) shape under a brace
        r"\$P" + SEP + r"=" + SEP + r"(?:d_|\d)",                      # "P = d_in d_h + …", "P = 4"
        r"(?<![\w\\])(?:\d+|2b|8m)P\b",                                # 8P, 2bP, 8mP bytes
        r"\(P\$? bytes\)|\$P\$ bytes|\(P\s*\\approx",                   # "(P bytes)", "(P ≈ 1.55 MiB)"
        r"\{K\s*P\s*b\}|\\frac\{N-1\}\{N\}\s*P\s*b",                    # 4N/(KPb), (N−1)/N·Pb
    ]),
}


def _markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    return path.read_text()


def violations(text: str) -> list[tuple[str, str]]:
    """``(letter, excerpt)`` for each place ``text`` uses a reserved letter with another meaning."""
    found = []
    for letter, (_, patterns) in RESERVED.items():
        for pattern in patterns:
            found += [(letter, text[max(0, m.start() - 30):m.end() + 30].replace("\n", " "))
                      for m in re.finditer(pattern, text)]
    return found


# Sentences as the lessons wrote them before the notation was made one (issue 27): every pattern family
# must catch them, so that the scan below cannot pass by matching nothing.
OLD = {
    "beta": [r"| `bytes_per_elem` | int $\beta \ge 1$ | 4 for float32 |", r"\text{bytes} = \beta\,\Psi,",
             r"let $A = \beta\, n\, w$ be one hidden activation", r"the storage format; itemsize $\beta$ = 2, 4 or 8"],
    "s": [r"$s = \lceil \Psi/N \rceil$", r"$S_k = [ks, (k+1)s)$", r"\underbrace{m_t}_{(s)} = \beta_1 m_{t-1}",
          r"$\underbrace{\tilde\theta}_{(Ns)} = [\theta;\, 0_{Ns-\Psi}]$"],
    "C": [r"with $d_h$ = `d_hidden`, $C$ = `n_classes`, biases", r"share is within $0.015$ of $1/C$",
          r"the $K \times C$ table of each client's examples", r"\underbrace{Z}_{(b,\,C)}", r"$L \approx \ln C$",
          "| gain on the output layer | first loss ≈ log C |", r"a first loss near $\log C$"],
    "P": [r"$w \in \mathbb R^P$", r"\underbrace{w_t}_{(P)}", r"$P = d_{in}d_h + d_h$", r"move $8mP$ bytes",
          r"the accumulator ($P$ bytes):", r"costing $\frac{4N}{KPb}$ of the gradient traffic"],
}
# ... and uses the table allows, which must not be flagged.
ALLOWED = [r"T_{\text{ring}} = 2(N-1)\alpha + 2\frac{N-1}{N}\frac{S}{\beta}", r"$\beta_1 m_{t-1} + (1-\beta_1)\,g_t$",
           r"$m = \max(\lceil CK \rceil, 1)$ with $C = 0.1$", r"$\Psi_N = \lceil \Psi/N \rceil$",
           r"multiplying the loss by $s = 2^{16}$", r"$t_1, \dots, t_P$ the gradient sizes", r"$8\Psi$ bytes",
           r"Adam, $\beta = (0.9, 0.999)$", r"$J$ classes, $1/J$ each", r"$P(k \in S_t) = m/K$"]


@pytest.mark.parametrize("letter", sorted(RESERVED))
def test_each_pattern_family_catches_the_old_text(letter: str) -> None:
    for sentence in OLD[letter]:
        assert any(found == letter for found, _ in violations(sentence)), f"{letter}: not caught: {sentence}"


def test_the_uses_the_glossary_allows_pass() -> None:
    flagged = {s: violations(s) for s in ALLOWED}
    assert not any(flagged.values()), {s: v for s, v in flagged.items() if v}


def test_the_glossary_states_each_reserved_meaning() -> None:
    table = (ROOT / "book/glossary.md").read_text()
    for row in (r"| $\beta_1$, $\beta_2$", r"| $\alpha$, $\beta$ |", r"| $s$ | the loss scale", r"| $K$, $C$, $m$ |",
                r"| $J$ | classes", r"| $\Psi$ | number of parameters", r"| $\Psi_N$ |", r"| $P$ |"):
        assert row in table, f"the glossary's notation table has no row {row!r}"


@pytest.mark.parametrize("path", LESSONS + PAGES, ids=[str(p.relative_to(ROOT)) for p in LESSONS + PAGES])
def test_reserved_letters_keep_their_meaning(path: Path) -> None:
    found = violations(_markdown(path))
    assert not found, f"{path.relative_to(ROOT)}: " + "; ".join(
        f"{RESERVED[letter][0]} — found …{excerpt}…" for letter, excerpt in found)
