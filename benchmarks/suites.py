"""Benchmark suites: prompts formatted so that the model writes the intended kind of text.

A model with a chat template gets its chat template; a base model (Gemma 3 270M) gets a plain completion
format (``Article: ...\\nSummary:``). ``multi_turn`` holds two turns; its second turn is built at run time
from the model's own (greedy) first answer.
"""

import inspect
import json
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "spec_bench" / "question_dev.jsonl"
SUITES = ("code_edit", "summarization", "rag", "qa", "translation", "math", "multi_turn", "repetitive")
_SPEC_BENCH = {
    "summarization": ("summarization",),
    "rag": ("rag",),
    "qa": ("qa",),
    "translation": ("translation",),
    "math": ("math_reasoning",),
    "multi_turn": ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"),
}


@dataclass(frozen=True)
class Task:
    suite: str
    prompt_id: str
    turns: tuple  # user messages; two for multi_turn
    completion_prefix: str = ""  # a base model's opening of the answer (e.g. a code fence)


def _spec_bench(categories):
    with open(DATA) as fh:
        rows = [json.loads(line) for line in fh]
    return [r for r in rows if r["category"] in categories]


def _code_tasks():
    """Real standard-library source with a small rewrite request: the "fast apply" pattern."""
    import argparse
    import json as json_mod
    import shlex
    import string
    import textwrap

    picks = [
        (json_mod.dumps, "Add type hints to the signature."),
        (textwrap.dedent, "Rename the variable `margin` to `common_prefix`."),
        (textwrap.indent, "Change the default of `predicate` to a named function `_has_text`."),
        (shlex.quote, "Add a docstring example."),
        (string.capwords, "Add type hints and keep everything else the same."),
        (textwrap.TextWrapper._split, "Rename `chunks` to `pieces`."),
        (argparse.ArgumentParser.add_argument_group, "Add type hints."),
        (json_mod.loads, "Change the default of `parse_float` handling comments to use keyword-only args."),
        (textwrap.TextWrapper._fix_sentence_endings, "Rename `patsearch` to `find_end`."),
        (shlex.split, "Add type hints."),
        (string.Formatter.vformat, "Rename `used_args` to `consumed`."),
        (textwrap.shorten, "Add a docstring example."),
    ]
    return [
        Task(
            "code_edit",
            f"code_{i}",
            (f"{instruction} Output the whole function.\n\n```python\n{inspect.getsource(fn)}```",),
            "```python\n",
        )
        for i, (fn, instruction) in enumerate(picks)
    ]


def _repetitive_tasks():
    """Structured rewriting in which most of the output repeats the input."""
    rows = [
        ("alice", 34, "paris", "engineer"),
        ("bob", 27, "lyon", "designer"),
        ("carol", 45, "nice", "doctor"),
        ("dave", 31, "lille", "teacher"),
        ("erin", 29, "nantes", "chef"),
        ("frank", 52, "rennes", "pilot"),
    ]
    csv = "name,age,city,job\n" + "\n".join(",".join(map(str, r)) for r in rows)
    log = "\n".join(
        f"2024-03-0{d} 12:0{m}:00 INFO worker-{m} processed batch {d * 10 + m} in {40 + m}ms"
        for d in range(1, 4)
        for m in range(1, 5)
    )
    config = "\n".join(
        f"[server{i}]\nhost = 10.0.0.{i}\nport = {8000 + i}\nworkers = {i + 2}\ntimeout = 30\n" for i in range(1, 6)
    )
    table = "| id | item | qty | price |\n|---|---|---|---|\n" + "\n".join(
        f"| {i} | item-{i} | {i * 3} | {i * 2.5:.2f} |" for i in range(1, 9)
    )
    tasks = [
        ("csv_to_jsonl", f"Convert this CSV to JSON lines, one object per row:\n\n{csv}"),
        ("extend_log", f"Continue this log with 8 more lines in exactly the same format:\n\n{log}"),
        ("reindent_config", f"Rewrite this config with every key indented by 4 spaces and values quoted:\n\n{config}"),
        ("extend_table", f"Add rows 9 to 16 to this table in the same format:\n\n{table}"),
        ("csv_quote", f"Rewrite this CSV with every field in double quotes:\n\n{csv}"),
        ("log_to_csv", f"Convert this log to CSV with columns date,time,level,worker,batch,ms:\n\n{log}"),
    ]
    return [Task("repetitive", name, (text,)) for name, text in tasks]


def build(suite, limit=None):
    """The tasks of ``suite`` (at most ``limit``)."""
    if suite not in SUITES:
        raise ValueError(f"suite must be one of {SUITES}, got {suite!r}")
    if suite == "code_edit":
        tasks = _code_tasks()
    elif suite == "repetitive":
        tasks = _repetitive_tasks()
    else:
        tasks = [
            Task(suite, f"sb_{r['question_id']}", tuple(r["turns"]) if suite == "multi_turn" else (r["turns"][0],))
            for r in _spec_bench(_SPEC_BENCH[suite])
        ]
    return tasks[:limit] if limit else tasks


def interleaved(suites, limit=None):
    """The tasks of every suite in round robin: each suite's first prompt, then each one's second, and so on.
    A run that is cut short after n prompts has then measured every suite on its first prompts."""
    by_suite = [build(suite, limit) for suite in suites]
    longest = max((len(tasks) for tasks in by_suite), default=0)
    return [tasks[i] for i in range(longest) for tasks in by_suite if i < len(tasks)]


_COMPLETION = {  # base-model formats: (user prefix, answer prefix)
    "summarization": ("Article: ", "\nSummary:"),
    "rag": ("Documents: ", "\nAnswer:"),
    "qa": ("Question: ", "\nAnswer:"),
    "translation": ("", "\nEnglish:"),
    "math": ("Question: ", "\nAnswer: Let's think step by step."),
    "code_edit": ("", "\n\nRewritten function:\n"),
    "repetitive": ("", "\n\nResult:\n"),
    "multi_turn": ("User: ", "\nAssistant:"),
}


def render(task, tokenizer, earlier_answers=()):
    """The prompt text for ``task``'s last turn given the model's answers to the earlier turns."""
    turns = task.turns[: len(earlier_answers) + 1]
    if tokenizer.chat_template:
        messages = []
        for i, turn in enumerate(turns):
            messages.append({"role": "user", "content": turn})
            if i < len(earlier_answers):
                messages.append({"role": "assistant", "content": earlier_answers[i]})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    user, answer = _COMPLETION[task.suite]
    text = task.turns[0]
    if task.suite == "summarization" and text.startswith("Summarize: "):
        text = text[len("Summarize: ") :]
    parts = [f"{user}{text}{answer}"]
    for i, later in enumerate(turns[1:]):
        parts.append(f" {earlier_answers[i].strip()}\n{user}{later}{answer}")
    return "".join(parts) + (" " + task.completion_prefix if task.completion_prefix else "")
