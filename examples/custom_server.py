"""A legal team's MCP server: zhiku's knowledge tools plus their own `lookup_article(law, number)`.

python examples/custom_server.py --config zhiku.yaml                            # stdio
python examples/custom_server.py --config zhiku.yaml --transport http --port 8765
"""

import re
import sys

from pydantic import BaseModel

import zhiku
from zhiku import KnowledgeBase
from zhiku.errors import NotFound

DIGITS = "零一二三四五六七八九"


class Article(BaseModel):
    law: str
    number: int
    text: str


def lookup_article(kb: KnowledgeBase, law: str, number: int) -> Article:
    """Return the exact text of one article (第N条) of a law in the knowledge base.

    When to use: the user cites an article by its number ("劳动合同法第十九条") and needs its exact wording.

    Example: {"law": "劳动合同法", "number": 19}

    Args:
        law: The law's name as ingested, e.g. 劳动合同法.
        number: The article number, 1–99, e.g. 19 for 第十九条.
    """
    tens, ones = divmod(number, 10)
    label = f"第{DIGITS[tens] if tens > 1 else ''}{'十' if tens else ''}{DIGITS[ones] if ones else ''}条"
    text = kb.document_text(f"{law}*")
    found = re.search(rf"{label}.*?(?=\n+第[一二三四五六七八九十百]+条|\n#|\Z)", text, re.S)
    if not 0 < number < 100 or found is None:
        raise NotFound(f"{law} has no article {number} ({label}) in the knowledge base")
    return Article(law=law, number=number, text=found.group(0).strip())


def log_call(call: zhiku.ToolCall) -> None:
    print(f"tool {call.name} took {call.duration_s:.3f}s, {call.result_chars} chars", file=sys.stderr)


if __name__ == "__main__":
    zhiku.serve(tools=[lookup_article], hooks=zhiku.Hooks(after_call=[log_call]))
