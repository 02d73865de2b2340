"""A length stand-in for WMT16 English -> German translation requests (the paper's Fig. 16).

No WMT16 data ships offline, so the lengths are drawn from a model whose statistics come from a
published source. What the authors' generator sent (benchmark/trace.py, generate_translation_requests;
see traces/README.md): the shared few-shot prefix (`workload.prefix_tokens`), then the request's own
input, an English sentence and the " =>" that asks for its translation, at temperature 0, with the
output as long as the German reference; all in LLaMA tokens.

The model:
  English words  = exp(mu_en + SIGMA z1)
  German words   = exp(mu_de + SIGMA (RHO z1 + sqrt(1 - RHO^2) z2)),   z1, z2 independent N(0, 1)
  input tokens   = max(1, round(TOKENS_PER_WORD x English words)) + SEPARATOR_TOKENS
  output tokens  = max(1, round(TOKENS_PER_WORD x German words))
with each mu = ln(mean) - SIGMA^2 / 2, so that the mean word counts are the published ones:

- Means: Europarl v7 German-English, the bulk of WMT16's En-De training data (1.92 M of its 4.5 M
  pairs, statmt.org/wmt16/translation-task.html), has 1,920,209 sentence pairs with 47,818,827
  English and 44,548,491 German words (Europarl v7 release statistics, statmt.org/europarl; P. Koehn,
  "Europarl: A Parallel Corpus for Statistical Machine Translation", MT Summit 2005): 24.90 English
  and 23.20 German words per sentence.
- TOKENS_PER_WORD: LLaMA's tokenizer does not ship offline, so the factor is solved from the paper
  itself: its 5-shot prefix is 341 tokens (Fig. 16 caption), i.e. "Translate English to German:\\n"
  (about INSTRUCTION_TOKENS) and 5 x "{en} => {de}\\n" (SEPARATOR_TOKENS + 1 newline each), so an
  average pair is (341 - 8) / 5 - 3 = 63.6 tokens for 24.90 + 23.20 words: 1.322 tokens per word.
  One factor for both languages: their sum is pinned by the paper, the split between them is not
  (German likely takes somewhat more tokens per word than English, which would move a few tokens
  from the input to the output). The 1-shot prefix checks it loosely: 8 + 1.322 x 48.1 + 3 = 75
  tokens predicted for one random example, 80 in the paper.
- SIGMA (log-spread of a sentence's length) and RHO (correlation of a pair's log lengths) are our
  choices, not published numbers: 0.55 gives a coefficient of variation of 0.59 and a median of 86% of
  the mean, and translations' lengths go together closely.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.workload.standin import sample_fitting

EUROPARL_V7_DE_EN = {"pairs": 1_920_209, "english_words": 47_818_827, "german_words": 44_548_491}
PAPER_PREFIX_TOKENS = {1: 80, 5: 341}  # Fig. 16 caption: the 1-shot and 5-shot prefixes
INSTRUCTION_TOKENS = 8   # BOS + "Translate English to German:\n" (about 8 LLaMA tokens)
SEPARATOR_TOKENS = 2     # " =>" after each English sentence
NEWLINE_TOKENS = 1


def tokens_per_word() -> float:
    """LLaMA tokens per word such that the paper's 5-shot prefix holds 5 average Europarl pairs."""
    shots = 5
    pair_tokens = (PAPER_PREFIX_TOKENS[shots] - INSTRUCTION_TOKENS) / shots - SEPARATOR_TOKENS - NEWLINE_TOKENS
    words = (EUROPARL_V7_DE_EN["english_words"] + EUROPARL_V7_DE_EN["german_words"]) / EUROPARL_V7_DE_EN["pairs"]
    return pair_tokens / words


@dataclass(frozen=True)
class TranslationStandIn:
    name: str
    english_words: float    # mean words per source sentence
    german_words: float     # mean words per reference translation
    tokens_per_word: float
    sigma: float
    rho: float

    @property
    def source(self) -> str:
        return (f"{self.name} (parametric stand-in for WMT16 En->De: lognormal sentence lengths, sigma={self.sigma} "
                f"rho={self.rho}, with Europarl v7's means of {self.english_words:.2f} English / "
                f"{self.german_words:.2f} German words x {self.tokens_per_word:.3f} LLaMA tokens per word, from the "
                f"paper's 341-token 5-shot prefix; input = English + '=>' ({SEPARATOR_TOKENS} tokens))")

    def draw(self, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        z = rng.standard_normal((2, count))
        half_var = self.sigma ** 2 / 2
        english = np.exp(math.log(self.english_words) - half_var + self.sigma * z[0])
        german = np.exp(math.log(self.german_words) - half_var
                        + self.sigma * (self.rho * z[0] + math.sqrt(1 - self.rho ** 2) * z[1]))
        prompt = np.maximum(1, np.rint(self.tokens_per_word * english)) + SEPARATOR_TOKENS
        output = np.maximum(1, np.rint(self.tokens_per_word * german))
        return prompt.astype(np.int64), output.astype(np.int64)

    def sample(self, count: int, max_seq_len: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """`count` pairs with prompt + output < max_seq_len (the room a prefix leaves): draw, drop the
        long ones, draw again."""
        if max_seq_len < SEPARATOR_TOKENS + 3:  # the shortest pair is 1 + separator, and 1
            raise ValueError(f"no translation request fits max_seq_len {max_seq_len}")
        return sample_fitting(self.draw, count, max_seq_len, rng)


TRANSLATION_STAND_INS = {
    "wmt16-en-de-standin": TranslationStandIn(
        "wmt16-en-de-standin",
        english_words=EUROPARL_V7_DE_EN["english_words"] / EUROPARL_V7_DE_EN["pairs"],
        german_words=EUROPARL_V7_DE_EN["german_words"] / EUROPARL_V7_DE_EN["pairs"],
        tokens_per_word=round(tokens_per_word(), 4), sigma=0.55, rho=0.9),
}
