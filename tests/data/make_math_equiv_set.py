"""Write tests/data/math_equiv_labels.jsonl, the hand-labelled answer-equivalence set.

Each label is the mathematical truth, decided by hand, never by running a checker. Lines:
{"id", "category", "completion", "answer", "label"}; label true means the completion's final
answer equals the reference. A row with "extraction": "strict" is judged under marker-only
extraction (MathVerifier(extraction="strict")); every other row under the default extraction.
Ids are positions: new rows go at the end. Run: python tests/data/make_math_equiv_set.py
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).with_name("math_equiv_labels.jsonl")

# (category, predicted final answer, reference answer, label); the prediction is wrapped in a
# completion by WRAPPERS below, cycling through the formats models use.
PAIRS: list[tuple[str, str, str, bool]] = [
    # integers, separators, decorations
    ("integer", "42", "42", True),
    ("integer", "042", "42", True),
    ("integer", "+7", "7", True),
    ("integer", "-0", "0", True),
    ("integer", "41", "42", False),
    ("integer", "-42", "42", False),
    ("integer", "1,000", "1000", True),
    ("integer", "1\\,000", "1000", True),
    ("integer", "10 000", "10000", True),
    ("integer", "1{,}234{,}567", "1234567", True),
    ("integer", "1,001", "1000", False),
    ("integer", "\\$25", "25", True),
    ("integer", "25 dollars", "25", True),
    ("integer", "5\\text{ cm}", "5", True),
    ("integer", "5 \\mbox{ meters}", "5", True),
    ("integer", "6\\text{ cm}", "5", False),
    ("integer", "30^\\circ", "30", True),
    ("integer", "30^{\\circ}", "30", True),
    ("integer", "30°", "30", True),
    ("integer", "31^\\circ", "30", False),
    ("integer", "5.", "5", True),
    ("integer", "\\mathbf{12}", "12", True),
    ("integer", "2^{10}", "1024", True),
    ("integer", "2^{10}", "1023", False),
    ("integer", "3!", "6", True),
    ("integer", "\\binom{5}{2}", "10", True),
    ("integer", "\\binom{5}{2}", "20", False),
    ("integer", "{12}", "12", True),
    ("integer", "\\displaystyle 12", "12", True),
    # fractions
    ("fraction", "\\frac{1}{2}", "\\frac12", True),
    ("fraction", "\\dfrac{3}{4}", "\\frac{3}{4}", True),
    ("fraction", "\\tfrac{3}{4}", "0.75", True),
    ("fraction", "3/4", "\\frac{3}{4}", True),
    ("fraction", "\\frac{6}{8}", "\\frac{3}{4}", True),
    ("fraction", "-\\frac{1}{3}", "\\frac{-1}{3}", True),
    ("fraction", "\\frac{1}{-3}", "-\\frac13", True),
    ("fraction", "\\frac{1}{3}", "-\\frac13", False),
    ("fraction", "\\frac{2}{3}", "\\frac{3}{2}", False),
    ("fraction", "0.5", "\\frac{1}{2}", True),
    ("fraction", "0.125", "\\frac18", True),
    ("fraction", "2\\frac{1}{2}", "\\frac{5}{2}", True),
    ("fraction", "-1\\frac{1}{4}", "-\\frac54", True),
    ("fraction", "\\frac{5}{2}", "2\\frac{1}{2}", True),
    ("fraction", "\\frac{10}{4}", "2\\frac{1}{2}", True),
    ("fraction", "\\frac{9}{4}", "2\\frac{1}{2}", False),
    ("fraction", "\\frac{1}{7}", "\\frac{1}{8}", False),
    ("fraction", "\\frac{\\frac{1}{2}}{2}", "\\frac14", True),
    # unicode
    ("unicode", "√2", "\\sqrt{2}", True),
    ("unicode", "√(2)", "\\sqrt2", True),
    ("unicode", "2√3", "2\\sqrt{3}", True),
    ("unicode", "√3", "\\sqrt{2}", False),
    ("unicode", "½", "\\frac{1}{2}", True),
    ("unicode", "¾", "0.75", True),
    ("unicode", "⅓", "\\frac12", False),
    ("unicode", "2π", "2\\pi", True),
    ("unicode", "π/2", "\\frac{\\pi}{2}", True),
    ("unicode", "π/3", "\\frac{\\pi}{2}", False),
    ("unicode", "−5", "-5", True),
    ("unicode", "−5", "5", False),
    ("unicode", "3×4", "12", True),
    ("unicode", "x²", "x^2", True),
    ("unicode", "∅", "\\varnothing", True),
    ("unicode", "∞", "\\infty", True),
    # scientific notation
    ("scientific", "3.2e4", "32000", True),
    ("scientific", "3.2E+04", "32000", True),
    ("scientific", "3.2\\times 10^4", "32000", True),
    ("scientific", "3.2 \\times 10^{4}", "3.2e4", True),
    ("scientific", "3.2 \\cdot 10^{4}", "32000", True),
    ("scientific", "3.2\\times 10^{5}", "32000", False),
    ("scientific", "1.5e-3", "0.0015", True),
    ("scientific", "1.5\\times10^{-3}", "\\frac{3}{2000}", True),
    ("scientific", "1.5e-4", "0.0015", False),
    ("scientific", "6.02\\times 10^{23}", "602000000000000000000000", True),
    ("scientific", "6.03\\times 10^{23}", "602000000000000000000000", False),
    # percent
    ("percent", "50\\%", "50", True),
    ("percent", "50\\%", "50\\%", True),
    ("percent", "50", "50\\%", True),
    ("percent", "50\\%", "0.5", True),
    ("percent", "0.5", "50\\%", True),
    ("percent", "12.5\\%", "12.5", True),
    ("percent", "12.5%", "\\frac{1}{8}", True),
    ("percent", "45\\%", "50\\%", False),
    ("percent", "5\\%", "50", False),
    # repeating decimals
    ("repeating", "0.\\overline{3}", "\\frac{1}{3}", True),
    ("repeating", "0.\\overline{6}", "\\frac23", True),
    ("repeating", "0.1\\overline{6}", "\\frac{1}{6}", True),
    ("repeating", "0.\\overline{142857}", "\\frac{1}{7}", True),
    ("repeating", "1.\\overline{09}", "\\frac{12}{11}", True),
    ("repeating", "0.\\overline{3}", "0.33", True),
    ("repeating", "0.\\overline{3}", "\\frac{3}{10}", False),
    ("repeating", "0.\\overline{36}", "\\frac{4}{11}", True),
    ("repeating", "0.\\overline{35}", "\\frac{4}{11}", False),
    # radicals and pi
    ("radical", "\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True),
    ("radical", "\\sqrt{8}", "2\\sqrt{2}", True),
    ("radical", "\\sqrt{12}", "2\\sqrt{3}", True),
    ("radical", "\\sqrt{12}", "3\\sqrt{2}", False),
    ("radical", "\\frac{1}{\\sqrt{3}}", "\\frac{\\sqrt3}{3}", True),
    ("radical", "\\sqrt{2}+\\sqrt{3}", "\\sqrt{5+2\\sqrt{6}}", True),
    ("radical", "\\sqrt{2}+\\sqrt{3}", "\\sqrt{5}", False),
    ("radical", "\\sqrt[3]{27}", "3", True),
    ("radical", "\\sqrt[3]{16}", "2\\sqrt[3]{2}", True),
    ("radical", "4\\pi", "4 \\pi", True),
    ("radical", "\\pi r^2", "r^2\\pi", True),
    ("radical", "\\frac{4}{3}\\pi", "\\frac{4\\pi}{3}", True),
    ("radical", "\\frac{3}{4}\\pi", "\\frac{4\\pi}{3}", False),
    ("radical", "2\\pi", "6.28", True),  # decimal reference: rounds to its 2 decimals
    ("radical", "\\pi^2", "\\pi \\cdot \\pi", True),
    ("radical", "3+2\\sqrt{2}", "(1+\\sqrt{2})^2", True),
    ("radical", "3-2\\sqrt{2}", "(1+\\sqrt{2})^2", False),
    ("radical", "\\sin\\frac{\\pi}{6}", "\\frac{1}{2}", True),
    ("radical", "\\cos 0", "1", True),
    ("radical", "\\log_2 8", "3", True),
    ("radical", "e^{0}", "1", True),
    # complex numbers
    ("complex", "3+4i", "4i+3", True),
    ("complex", "3-4i", "3+4i", False),
    ("complex", "i^2", "-1", True),
    ("complex", "(1+i)^2", "2i", True),
    ("complex", "\\frac{1}{i}", "-i", True),
    ("complex", "\\frac{1}{i}", "i", False),
    ("complex", "1+i", "1-i", False),
    ("complex", "2i", "2", False),
    ("complex", "-2+2i", "2i-2", True),
    ("complex", "\\sqrt{-4}", "2i", True),
    # sets, intervals, tuples, matrices
    ("structure", "\\{1, 2, 3\\}", "\\{3, 2, 1\\}", True),
    ("structure", "\\{1, 2\\}", "\\{1, 2, 3\\}", False),
    ("structure", "(1, 2)", "(1,2)", True),
    ("structure", "(2, 1)", "(1, 2)", False),
    ("structure", "\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", True),
    ("structure", "(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    ("structure", "(3, \\pi)", "\\left( 3, \\frac{\\pi}{2} \\right)", False),
    ("structure", "[1, 2)", "[1,2)", True),
    ("structure", "[1, 2]", "[1,2)", False),
    ("structure", "(-\\infty, 3]", "(-\\infty,3]", True),
    ("structure", "(-\\infty, 3)", "(-\\infty,3]", False),
    ("structure", "(-\\infty, 1) \\cup (2, \\infty)", "(-\\infty,1)\\cup(2,\\infty)", True),
    ("structure", "(-\\infty, 1] \\cup (2, \\infty)", "(-\\infty,1)\\cup(2,\\infty)", False),
    ("structure", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),
    ("structure", "\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", False),
    ("structure", "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}", "\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}", True),
    ("structure", "\\begin{pmatrix} 1/2 \\\\ 0.5 \\end{pmatrix}", "\\begin{pmatrix}\\frac12\\\\\\frac12\\end{pmatrix}", True),
    ("structure", "\\emptyset", "\\varnothing", True),
    ("structure", "\\{\\}", "\\emptyset", True),
    ("structure", "1, 2, 3", "1,2,3", True),
    ("structure", "3, 2, 1", "1,2,3", True),
    ("structure", "1, 2", "1,2,3", False),
    ("structure", "-1, 2", "2, -1", True),
    # equations and inequalities
    ("equation", "x = 3", "3", True),
    ("equation", "x=3", "x=3", True),
    ("equation", "3", "x=3", True),
    ("equation", "x = 4", "3", False),
    ("equation", "y = 2x + 3", "y=2x+3", True),
    ("equation", "y = 3 + 2x", "y=2x+3", True),
    ("equation", "y = 2x - 3", "y=2x+3", False),
    ("equation", "x \\le 3", "x\\leq 3", True),
    ("equation", "x < 3", "x\\leq 3", False),
    ("equation", "x \\ge 2", "2 \\le x", True),
    ("equation", "x > 2", "2 \\le x", False),
    ("equation", "k = \\frac{1}{2}", "\\frac12", True),
    # symbolic expressions
    ("symbolic", "x^2+2x+1", "(x+1)^2", True),
    ("symbolic", "x^2+2x", "(x+1)^2", False),
    ("symbolic", "2(x+1)", "2x+2", True),
    ("symbolic", "\\frac{x^2-1}{x-1}", "x+1", True),
    ("symbolic", "a^2-b^2", "(a-b)(a+b)", True),
    ("symbolic", "a^2+b^2", "(a-b)(a+b)", False),
    ("symbolic", "\\frac{1}{2}x", "\\frac{x}{2}", True),
    ("symbolic", "x^3", "x^2", False),
    ("symbolic", "3p - 2q", "-2q + 3p", True),
    ("symbolic", "p - q", "q - p", False),
    ("symbolic", "\\sin^2 x + \\cos^2 x", "1", True),
    # text answers
    ("text", "\\text{Evelyn}", "\\text{Evelyn}", True),
    ("text", "Evelyn", "\\text{Evelyn}", True),
    ("text", "\\text{evelyn}", "\\text{Evelyn}", True),
    ("text", "\\text{Monday}", "\\text{Tuesday}", False),
    ("text", "\\text{odd}", "\\text{odd}", True),
    ("text", "\\text{even}", "\\text{odd}", False),
    ("text", "\\text{(C)}", "\\text{(C)}", True),
    # close-but-wrong numbers: never equal
    ("close_wrong", "3.142857", "\\frac{22}{7}", False),
    ("close_wrong", "0.333", "\\frac{1}{3}", False),
    ("close_wrong", "0.3333333", "\\frac{1}{3}", False),
    ("close_wrong", "0.6667", "\\frac{2}{3}", False),
    ("close_wrong", "1.4142", "\\sqrt{2}", False),
    ("close_wrong", "1.41421356", "\\sqrt{2}", False),
    ("close_wrong", "3.14159", "\\pi", False),
    ("close_wrong", "3.1415926535", "\\pi", False),
    ("close_wrong", "2.718", "e", False),
    ("close_wrong", "\\frac{1}{1001!}", "\\frac{1}{1000!}", False),
    ("close_wrong", "1000001", "1000000", False),
    ("close_wrong", "1000000.1", "1000000", False),
    ("close_wrong", "0.0000001", "0", False),
    ("close_wrong", "1.0000001", "1", False),
    ("close_wrong", "\\frac{355}{113}", "\\pi", False),
    ("close_wrong", "\\frac{1}{10^{20}}", "0", False),
    ("close_wrong", "10^{-7}", "0", False),
    ("close_wrong", "2^{100}+1", "2^{100}", False),
    ("close_wrong", "1.99999999", "2", False),
    ("close_wrong", "0.99", "0.9\\overline{9}", False),
    ("close_wrong", "\\frac{22}{7}", "\\pi", False),
    ("close_wrong", "2.23607", "\\sqrt{5}", False),
    ("close_wrong", "(0.333, 0.5)", "(\\frac13, \\frac12)", False),
    ("close_wrong", "\\begin{pmatrix} 0.333 \\\\ 1 \\end{pmatrix}", "\\begin{pmatrix}\\frac13\\\\1\\end{pmatrix}", False),
    ("close_wrong", "\\sqrt{2} + 10^{-30}", "\\sqrt{2}", False),
    # a decimal reference is an approximation: its own precision, no more
    ("decimal_ref", "3.14", "3.14", True),
    ("decimal_ref", "3.1416", "3.14", True),
    ("decimal_ref", "\\pi", "3.14", True),
    ("decimal_ref", "\\frac{22}{7}", "3.14", True),
    ("decimal_ref", "3.1", "3.14", False),
    ("decimal_ref", "3.15", "3.14", False),
    ("decimal_ref", "3.146", "3.14", False),
    ("decimal_ref", "\\frac{1}{3}", "0.33", True),
    ("decimal_ref", "\\frac{1}{3}", "0.333", True),
    ("decimal_ref", "0.34", "0.33", False),
    ("decimal_ref", "1.5", "1.50", True),
    ("decimal_ref", "\\sqrt{2}", "1.414", True),
    ("decimal_ref", "\\sqrt{2}", "1.41", True),
    ("decimal_ref", "\\sqrt{3}", "1.41", False),
    ("decimal_ref", "17.5", "17.50", True),
    ("decimal_ref", "2", "2.0", True),
    ("decimal_ref", "2.1", "2.0", False),
    # more of each kind
    ("integer", "1 000 000", "10^6", True),
    ("fraction", "\\frac{1}{2}", "\\frac{2}{4}", True),
    ("fraction", "1/3", "0.\\overline{3}", True),
    ("fraction", "\\frac{14}{3}", "4\\frac{2}{3}", True),
    ("radical", "\\sqrt{50}", "5\\sqrt{2}", True),
    ("radical", "\\sqrt{50}", "5\\sqrt{3}", False),
    ("radical", "2^{1/2}", "\\sqrt2", True),
    ("complex", "\\frac{1+i}{1-i}", "i", True),
    ("complex", "e^{i\\pi}", "-1", True),
    ("structure", "\\{-1, 1\\}", "\\{1, -1\\}", True),
    ("structure", "(1, 2, 3)", "(1, 2, 3)", True),
    ("structure", "(1, 3, 2)", "(1, 2, 3)", False),
    ("structure", "[0, \\infty)", "[0,\\infty)", True),
    ("equation", "x = -2", "-2", True),
    ("equation", "x^2 + y^2 = 4", "x^2+y^2=4", True),
    ("equation", "x^2 + y^2 = 9", "x^2+y^2=4", False),
    ("symbolic", "\\frac{x+1}{2}", "\\frac{x}{2}+\\frac{1}{2}", True),
    ("symbolic", "n(n+1)/2", "\\frac{n^2+n}{2}", True),
    ("decimal_ref", "0.1 + 0.2", "0.3", True),
    ("close_wrong", "99.99", "100", False),
    ("close_wrong", "\\frac{999999}{1000000}", "1", False),
    ("text", "\\text{Yes}", "\\text{yes}", True),
    ("unicode", "1/√2", "\\frac{\\sqrt{2}}{2}", True),
    ("scientific", "1e6", "1000000", True),
]

# Full completions: extraction, position, anti-gaming, letters, no answer.
COMPLETIONS: list[tuple[str, str, str, bool] | tuple[str, str, str, bool, str]] = [
    ("extraction", "First $\\boxed{12}$. Wait, I made an error; it is $\\boxed{14}$.", "14", True),
    ("extraction", "First $\\boxed{12}$. Wait, I made an error; it is $\\boxed{14}$.", "12", False),
    ("extraction", "Hence $x=5$.\n\nThe final answer is $5$.", "5", True),
    ("extraction", "The final answer is: $\\frac{3}{4}$", "\\frac34", True),
    ("extraction", "We compute 6*7.\n#### 42", "42", True),
    ("extraction", "We compute 6*7.\n#### 43", "42", False),
    ("extraction", "Reasoning...\n<answer>17</answer>", "17", True),
    ("extraction", "Reasoning...\n<answer> \\frac{1}{2} </answer>", "0.5", True),
    ("extraction", "So the total is **42**.", "42", True),
    ("extraction", "**Final Answer:** 36", "36", True),
    ("extraction", "Answer: 9", "9", True),
    ("extraction", "Answer: $-\\frac{1}{2}$", "-\\frac12", True),
    ("extraction", "Therefore, the answer is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    ("extraction", "The answer is \\(\\frac{7}{2}\\).", "3.5", True),
    ("extraction", "The answer is \\[ 2^{5} \\]", "32", True),
    ("extraction", "Final answer:\n$$ 100 $$", "100", True),
    ("extraction", "The answer is 12 apples.", "12", True),
    ("extraction", "\\fbox{8}", "8", True),
    ("extraction", "It is $\\boxed 7$.", "7", True),
    ("extraction", "The final answer is $\\boxed{\\dfrac{9}{2}}$. I hope it is correct.", "\\frac92", True),
    ("extraction", "$\\boxed{5}$ is wrong, the final answer is 6.", "6", True),
    ("extraction", "$\\boxed{5}$ is wrong, the final answer is 6.", "5", False),
    ("extraction", "Thus $\\boxed{\\boxed{3}}$", "3", True),
    ("extraction", "The answer is $\\boxed{\\text{(B)}}$", "\\text{(B)}", True),
    # multiple-choice letters in prose (the reference is a letter)
    ("choice", "Comparing the options, the answer is (B).", "B", True),
    ("choice", "Comparing the options, the answer is (B).", "C", False),
    ("choice", "The correct answer is C.", "C", True),
    ("choice", "The final answer is $\\boxed{D}$", "D", True),
    ("choice", "The final answer is $\\boxed{D}$", "(D)", True),
    ("choice", "Answer: (a)", "A", True),
    ("choice", "... so option **E** fits best.", "E", True),
    ("choice", "Options (A) and (C) fail; it must be (B).", "B", True),
    ("choice", "The answer is B because A is too small.", "B", True),
    ("choice", "The answer is A, B, C or D.", "B", False),
    # anti-gaming: only the final-answer position counts
    ("anti_gaming", "The answer is one of $\\boxed{1}$, $\\boxed{2}$, $\\boxed{3}$, $\\boxed{4}$.", "2", False),
    ("anti_gaming", "$\\boxed{1, 2, 3, 4, 5}$", "3", False),
    ("anti_gaming", "The answer is 3 or 4 or 5.", "4", False),
    ("anti_gaming", "The answer is $3$ or $4$.", "4", False),
    ("anti_gaming", "$\\boxed{3 \\text{ or } 4}$", "4", False),
    ("anti_gaming", "$\\boxed{\\{1,2,3,4,5,6,7,8,9,10\\}}$", "7", False),
    # marker-only extraction finds no answer here; the default extraction reads 42 (see ISSUE16)
    ("anti_gaming", "What is $6 \\times 7$? Let me restate: find $6 \\times 7$, which is 42 maybe.", "42", False, "strict"),
    ("anti_gaming", "Find the value of $x$ if $2x = 10$.", "5", False),
    ("anti_gaming", "x = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10; so $\\boxed{x \\in \\{1,...,10\\}}$", "4", False),
    ("anti_gaming", "Candidates: 5, 6, 7. The final answer is $\\boxed{7}$.", "6", False),
    ("anti_gaming", "$\\boxed{7}$ or maybe $\\boxed{6}$", "7", False),
    ("anti_gaming", "$\\boxed{x}$", "5", False),
    ("anti_gaming", "$\\boxed{\\text{the answer}}$", "5", False),
    # no answer at all
    ("no_answer", "", "5", False),
    ("no_answer", "I am not sure how to solve this.", "5", False),
    ("no_answer", "We have 2 + 3 = 5 so the sum is five", "5", False, "strict"),
    ("no_answer", "$\\boxed{}$", "5", False),
    ("no_answer", "\\boxed{5", "5", False),
    ("no_answer", "<answer></answer>", "5", False),
]


def _adversarial() -> list[tuple[str, str, str, bool]]:
    """Inputs built to hang, crash or exhaust a checker; none of them is a correct answer."""
    nested = "{" * 50_000 + "1" + "}" * 50_000
    return [
        ("adversarial", "$\\boxed{9^{9^{9^9}}}$", "5", False),
        ("adversarial", "$\\boxed{10^{10^{10}}}$", "10", False),
        ("adversarial", "$\\boxed{2^{2^{2^{2^{2^{2}}}}}}$", "2", False),
        ("adversarial", "$\\boxed{(10^{10})!}$", "5", False),
        ("adversarial", "$\\boxed{100000000!}$", "1", False),
        ("adversarial", "$\\boxed{(10^7)^{10^7}}$", "3", False),
        ("adversarial", "$\\boxed{\\frac{1}{(10^{9})!}}$", "0", False),
        ("adversarial", "$\\boxed{" + nested + "}$", "2", False),
        ("adversarial", "\\boxed{" + "{" * 100_000, "1", False),
        ("adversarial", "\\boxed{" * 20_000 + "5", "5", False),
        ("adversarial", "The answer is " + "(" * 5000 + "1" + ")" * 5000, "2", False),
        ("adversarial", "$\\boxed{" + "1+" * 3000 + "1}$", "3000", False),
        ("adversarial", "$\\boxed{" + "9" * 5000 + "}$", "9", False),
        ("adversarial", "\x00\x01\\boxed{\udcff}", "1", False),
        ("adversarial", "$\\boxed{\\frac{1}{0}}$", "0", False),
        ("adversarial", "$\\boxed{0^0 - 1}$", "5", False),
        ("adversarial", "$\\boxed{\\infty - \\infty}$", "0", False),
        ("adversarial", "$\\boxed{\\int_0^{\\infty} e^{-x^2}\\,dx}$", "7", False),
        ("adversarial", "$\\boxed{\\sum_{n=1}^{10^{12}} n}$", "5", False),
        ("adversarial", "$\\boxed{" + "\\sqrt{" * 500 + "2" + "}" * 500 + "}$", "1", False),
        ("adversarial", "$\\boxed{\\begin{pmatrix}" + "1&" * 2000 + "1\\end{pmatrix}}$", "1", False),
        ("adversarial", "$$" * 10_000, "1", False),
        ("adversarial", "$\\boxed{9^{9^{9^9}}}$", "9^{9^{9^9}}", True),
    ]


# Issue 16: what a Math-Verify user expects, and the false-positive classes it found.
ISSUE16: list[tuple[str, str, str, bool]] = [
    # no marker: the final sentence's answer (the two strict rows above, read by default)
    ("extraction", "What is $6 \\times 7$? Let me restate: find $6 \\times 7$, which is 42 maybe.", "42", True),
    ("extraction", "We have 2 + 3 = 5 so the sum is five", "5", True),
    ("extraction", "Therefore, $\\cos \\angle RPS = -\\frac{24}{25}$.", "-\\frac{24}{25}", True),
    ("extraction", "Therefore, $\\cos \\angle RPS = \\frac{24}{25}$.", "-\\frac{24}{25}", False),
    ("extraction", "x = 9", "9", True),
    ("extraction", "x = 9", "3", False),
    ("extraction", "So the area is \\(48\\) square units.", "48", True),
    ("extraction", "So the area is \\(48\\) square units.", "46", False),
    ("extraction", "Final Answer: The largest $n$ is 34.", "34", True),
    ("extraction", "Final Answer: The largest $n$ is 34.", "35", False),
    ("extraction", "There are 12 distinct sequences. I hope it is correct.", "12", True),
    ("extraction", "The identity matrix is $ \\begin{pmatrix}1 & 0 \\\\ 0 & 1\\end{pmatrix} $.",
     "\\begin{pmatrix}1 & 0 \\\\ 0 & 1\\end{pmatrix}", True),
    ("anti_gaming", "What is $6 \\times 7$?", "42", False),
    ("anti_gaming", "AZYUK2A", "2", False),
    # several boxes form one answer; a correction or a hedge does not
    ("structure", "$$\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}$$", "(2, 2), (6, 2)", True),
    ("structure", "$$\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 3)}$$", "(2, 2), (6, 2)", False),
    ("structure", "so $n = \\boxed{-2}$ \\quad \\text{and} \\quad $\\boxed{1}$.", "1,-2", True),
    ("structure", "\\(\\boxed{1}\\) and \\(\\boxed{-2}\\).", "-2, 1", True),
    ("extraction", "So $\\boxed{15\\frac{39}{40}}$, or $\\boxed{\\frac{639}{40}}$ pounds.", "\\frac{639}{40}", True),
    ("extraction", "First $\\boxed{12}$ no wait, $\\boxed{14}$", "14", True),
    ("anti_gaming", "$\\boxed{2}$ and $\\boxed{3}$", "3", False),
    ("anti_gaming", "\\boxed{1} no no no no no \\boxed{2}", "1, 2", False),
    # separators inside one answer
    ("structure", "$$\\boxed{a_{37} = 19, \\quad a_3 = 2}$$", "a_3 = 2, a_{37} = 19", True),
    ("structure", "$$\\boxed{(x, y) = (5, 8) \\quad \\text{and} \\quad (8, 5)}$$", "(5, 8), (8, 5)", True),
    ("structure", "The numbers are $19, 46, \\text{ and } 82$.", "19, 46, and 82", True),
    # percent words
    ("percent", "$\\boxed{28 percent}$", "28\\%", True),
    ("percent", "The loss is 28 percent.", "28\\%", True),
    ("percent", "The loss is 27 percent.", "28\\%", False),
    # commas: thousands, lists, decimal commas
    ("integer", "is $\\boxed{32,\\! 349}$", "32349", True),
    ("integer", "$\\boxed{12,345,678}$", "12345678", True),
    ("anti_gaming", "is $\\boxed{32, 349}$", "32349", False),
    ("anti_gaming", "$\\boxed{1, 234}$", "1234", False),
    ("structure", "$\\boxed{-2,1}$", "-2,1", True),
    ("decimal_ref", "1.22", "1,22", True),
    ("decimal_ref", "1.23", "1,22", False),
    ("decimal_ref", "0.111", "0,111", True),
    ("decimal_ref", "Soucis : 2,74 $ a..", "2.74", True),
    # times and ratios: never a division by zero
    ("anti_gaming", "$12:00$", "1:00", False),
    ("anti_gaming", "The meeting starts at $3:00$.", "5:00", False),
    ("text", "The train leaves at 12:00.", "12:00", True),
    ("fraction", "$\\boxed{7:32}$", "S_{MBCN}:S=7:32", True),
    ("fraction", "$\\boxed{14:64}$", "7:32", True),
    ("anti_gaming", "$\\boxed{\\frac{1}{0}}$", "\\frac{2}{0}", False),
    # references as datasets ship them
    ("integer", "The answer is $\\boxed{72}$.",
     "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72", True),
    ("integer", "The answer is $\\boxed{71}$.",
     "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72", False),
    ("integer", "#### 1,000", "So the total is 500 + 500 = 1000 dollars. #### 1000", True),
    ("fraction", "The answer is $0.5$.", "Half of the marbles are red, so the fraction is $\\boxed{\\frac{1}{2}}$.", True),
    ("fraction", "The answer is $0.25$.", "Half of the marbles are red, so the fraction is $\\boxed{\\frac{1}{2}}$.", False),
]


# How a bare predicted answer becomes a completion (cycled, so every category meets several).
WRAPPERS = [
    "Solving step by step gives the result.\n\nTherefore, the answer is $\\boxed{{{a}}}$.",
    "Let me work through it.\nThe final answer is ${a}$.",
    "Compute carefully.\n#### {a}",
    "<think>some reasoning</think>\n<answer>{a}</answer>",
    "After simplifying, we get $\\boxed{{{a}}}$",
]


def build() -> list[dict]:
    """All labelled items, each with a stable id."""
    rows = []
    for i, (cat, pred, ref, label) in enumerate(PAIRS):
        wrapper = WRAPPERS[i % len(WRAPPERS)]
        if cat in ("structure", "equation", "symbolic", "close_wrong", "complex") and "{a}" in wrapper and "boxed" not in wrapper:
            wrapper = WRAPPERS[0]  # prose or #### lines cannot carry commas and relations unambiguously
        rows.append({"category": cat, "completion": wrapper.format(a=pred), "answer": ref, "label": label})
    for cat, completion, ref, label, *mode in COMPLETIONS + _adversarial() + ISSUE16:
        row = {"category": cat, "completion": completion, "answer": ref, "label": label}
        if mode:
            row["extraction"] = mode[0]
        rows.append(row)
    for n, row in enumerate(rows):
        row["id"] = f"eq-{n:04d}"
    return rows


if __name__ == "__main__":
    rows = build()
    with OUT.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} rows to {OUT}")
