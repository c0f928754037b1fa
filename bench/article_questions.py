"""Questions naming a statute article (劳动合同法第47条, 劳动合同法第八十二条) against the sample laws, with and
without the article lookups (a number in digits spelled 第四十七条; the named law's article first), plus how many
dev-set questions they touch at all.

    PYTHONPATH=src .venv/bin/python bench/article_questions.py --index demo-index [--data ../shared/eval]

The index is one built from examples/laws (`make demo` builds demo-index). For each question: the rank of the
named article of the named law among the top 10 hybrid hits (a passage holding it counts), with the lookups
switched off (``article_numbers`` and ``named_articles_first`` as no-ops) and as zhiku searches now. With --data,
every dev question is checked for a named article (第…条, in digits or spelled): one without is searched exactly
as before (same terms, one form, the fused order).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from unittest import mock

import yaml

from zhiku import text as text_mod
from zhiku.api import KnowledgeBase
from zhiku.retrieval import search as search_mod
from zhiku.settings import load_settings

ARTICLE = re.compile(r"第[零一二三四五六七八九十百千两〇]+条")
QUESTIONS = [  # (question, source of the named article, the article)
    ("劳动合同法第47条", "劳动合同法(2012-12-28).md", "第四十七条"),
    ("劳动法第44条规定了什么", "劳动法(2018-12-29).md", "第四十四条"),
    ("劳动合同法第14条无固定期限", "劳动合同法(2012-12-28).md", "第十四条"),
    ("女职工劳动保护特别规定第7条", "女职工劳动保护特别规定(2012-04-28).md", "第七条"),
    ("劳动合同法第82条 不签合同", "劳动合同法(2012-12-28).md", "第八十二条"),
    ("职工带薪年休假条例第5条", "职工带薪年休假条例(2007-12-14).md", "第五条"),
    ("工资支付暂行规定第18条", "工资支付暂行规定(1994-12-06).md", "第十八条"),
    ("劳动法第100条", "劳动法(2018-12-29).md", "第一百条"),
    ("劳动合同法第八十二条", "劳动合同法(2012-12-28).md", "第八十二条"),
    ("劳动法第四十四条", "劳动法(2018-12-29).md", "第四十四条"),
]


def rank(kb: KnowledgeBase, question: str, source: str, article: str) -> int | None:
    hits = kb.retrieve(question, mode="hybrid", top_k=10).hits
    return next((n for n, h in enumerate(hits, 1) if h.chunk.source == source and article in h.chunk.section), None)


def dev_questions(data: Path) -> list[str]:
    out = []
    for name in ("cmrc2018_dev", "meddialog_im_dev", "stard_dev"):
        for line in (data / name / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            q = json.loads(line)
            out.append(q.get("text") or q["query"])
    longdoc = yaml.safe_load((data / "stard_longdoc" / "eval.yaml").read_text(encoding="utf-8"))
    return out + [q["query"] for q in longdoc["queries"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, required=True, help="an index of examples/laws")
    ap.add_argument("--data", type=Path, default=None, help="the dev sets' folder, to count the questions touched")
    args = ap.parse_args()
    with KnowledgeBase(load_settings(None, index=args.index, tracing={"enabled": False})) as kb:
        print("| question | rank without the lookups | rank now |\n| --- | --- | --- |")
        for question, source, article in QUESTIONS:
            with (
                mock.patch.object(text_mod, "article_numbers", str),
                mock.patch.object(search_mod, "article_numbers", str),
                mock.patch.object(search_mod, "named_articles_first", lambda hits, *_: list(hits)),
            ):
                kb.searcher._vectors = type(kb.searcher._vectors)()  # (no vector of the other run kept)
                before = rank(kb, question, source, article)
            now = rank(kb, question, source, article)
            print(f"| {question} | {before or '> 10'} | {now or '> 10'} |")
        if args.data is None:
            return
        questions = dev_questions(args.data)
        norm = [kb.text.normalize(q) for q in questions]
        touched = [q for q in norm if text_mod.article_numbers(q) != q or ARTICLE.search(q)]
        print(f"\ndev questions naming an article (第…条, in digits or spelled): {len(touched)} of {len(questions)}")


if __name__ == "__main__":
    main()
