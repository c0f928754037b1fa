"""Markdown tables stay tables in answer snippets (CLI and MCP both print ``build_answer``'s Markdown)."""

from __future__ import annotations

from zhiku.retrieval.answer import build_answer, flatten, focused_snippet, snippet
from zhiku.types import Chunk, Hit

TABLE = "| | (1) | (2) |\n| --- | --- | --- |\n| 工资 | 0.12 | 0.34 |\n| 工龄 | 0.56 | 0.78 |"
TEXT = f"表 1 回归结果\n{TABLE}\n注：括号内为\n标准误。"


def hit(text: str, section: str = "第三章 > 表 1") -> Hit:
    chunk = Chunk("c1", "d1", "docs", "paper.pdf", "pdf", section, 4, 0, len(text), 0, text)
    return Hit(chunk=chunk, score=1.0)


def test_tables_keep_their_rows_and_prose_is_joined() -> None:
    assert flatten(TEXT) == f"表 1 回归结果\n\n{TABLE}\n\n注：括号内为 标准误。"
    assert snippet(TEXT, 200) == flatten(TEXT)
    cut = snippet(TEXT, 70)  # a cut inside the table keeps whole rows only
    assert cut == "表 1 回归结果\n\n| | (1) | (2) |\n| --- | --- | --- |\n| 工资 | 0.12 | 0.34 |\n\n…"


def test_a_focused_snippet_starts_at_the_table_header_not_mid_table() -> None:
    text = "前言很长的一段话。" * 6 + "\n" + TEXT
    got = focused_snippet(text, 90, ["工龄"])
    assert got.startswith(f"…\n\n{TABLE}\n\n注："), got


def test_the_answer_sets_a_table_off_as_its_own_block() -> None:
    md = build_answer("工龄的系数", "bm25", [hit(TABLE)]).markdown
    assert f"[1]\n\n{TABLE}\n\n(第三章 > 表 1)\n\n**来源 / Sources**" in md
    prose = build_answer("q", "bm25", [hit("第一段\n第二段")]).markdown
    assert "[1] 第一段 第二段 (第三章 > 表 1)\n" in prose


CODE = "```\n\\documentclass[green]{elegantbook} %or\n\\documentclass[color=green]{elegantbook}\n```"
WITH_CODE = f"调用颜色主题 green 的方法为\n\n{CODE}\n\n另外还有\n一个选项。"


def test_code_blocks_keep_their_lines_and_cuts_close_them() -> None:
    # a code block flattened onto one line (``` \documentclass… %or \documentclass… ```) was unreadable
    assert flatten(WITH_CODE) == f"调用颜色主题 green 的方法为\n\n{CODE}\n\n另外还有 一个选项。"
    assert snippet(WITH_CODE, 200) == flatten(WITH_CODE)
    # a cut inside the block keeps whole lines and closes it: an open fence would turn the rest of the answer to code
    assert (
        snippet(WITH_CODE, 70)
        == "调用颜色主题 green 的方法为\n\n```\n\\documentclass[green]{elegantbook} %or\n```\n\n…"
    )
    assert snippet(WITH_CODE, 25) == "调用颜色主题 green 的方法为\n\n…"  # no whole line fits: end before the block
    assert (
        snippet(f"{CODE}\n\n下文。" * 2, len(CODE) + 3) == f"{CODE}\n\n…"
    )  # a cut just after a block: "```…" stays open
    # a sentence end inside code (%or, ;) is no place to cut prose
    code = "```\na; b; c; d; e; f; g;\n```"
    assert snippet(f"前文。\n{code}\n后面的文字很长很长很长。", 40) == f"前文。\n\n{code}\n\n后面的文…"


def test_a_focused_snippet_starts_at_the_opening_fence_not_inside_the_block() -> None:
    text = "很长的开头。" * 20 + WITH_CODE
    assert focused_snippet(text, 100, ["color"]) == f"…\n\n{CODE}\n\n另外还有 一个选项。"


def test_the_answer_sets_a_code_block_off_as_its_own_block() -> None:
    md = build_answer("颜色主题", "bm25", [hit(CODE, "2.3 颜色主题")]).markdown
    assert f"[1]\n\n{CODE}\n\n(2.3 颜色主题)\n\n**来源 / Sources**" in md


STEPS = (
    "费用报销按以下流程办理：\n\n1. 员工在费控系统提交报销单；\n2. 部门负责人审核；\n"
    "3. 财务部复核票据，金额超过5000元的须财务总监审批；\n4. 款项每月15日打入工资卡。\n\n发票须在90天内提交。"
)


def test_list_items_keep_their_numbers_one_per_line() -> None:
    # 报销流程是什么 showed "费用报销按以下流程办理： 1. 员工… 2. 部门… 3. …" on one line, the steps run together
    items = "1. 员工在费控系统提交报销单；\n2. 部门负责人审核；\n3. 财务部复核票据，金额超过5000元的须财务总监审批；\n4. 款项每月15日打入工资卡。"
    assert flatten(STEPS) == f"费用报销按以下流程办理：\n\n{items}\n\n发票须在90天内提交。"
    assert flatten("- 甲\n  - 乙\n- 丙\n说明") == "- 甲\n  - 乙\n- 丙\n\n说明"  # nesting kept
    md = build_answer("报销流程", "hybrid", [hit(STEPS, "员工手册 > 2.1 报销流程")]).markdown
    assert f"[1] 费用报销按以下流程办理：\n\n{items}\n\n发票须在90天内提交。 (员工手册 > 2.1 报销流程)" in md


def test_a_snippet_starting_at_a_list_item_keeps_its_number_and_renders_as_a_list() -> None:
    text = "前言很长的一段话。" * 8 + "\n\n" + STEPS
    got = focused_snippet(text, 60, ["财务总监"])
    assert (
        got
        == "…\n\n3. 财务部复核票据，金额超过5000元的须财务总监审批；\n4. 款项每月15日打入工资卡。\n\n发票须在90天内提交。"
    )
    md = build_answer("x", "hybrid", [hit(STEPS[14:], "s")]).markdown
    assert md.split("\n\n")[1] == "[1]"  # an item first: off the marker's line, or Markdown would not list it


CODES = (
    "| 错误码 | 含义 | 处理建议 |\n| --- | --- | --- |\n| ORD-4001 | 库存不足 | 减少购买数量或稍后重试 |\n"
    "| ORD-4002 | SKU 不存在 | 检查 sku_id 是否正确 |\n| ORD-4290 | 请求过于频繁（限流） | 每个应用每秒最多 50 次请求 |\n"
    "| ORD-5000 | 服务内部错误 | 联系订单服务值班 |"
)


def test_a_table_too_long_for_the_snippet_shows_its_header_and_the_row_asked_for() -> None:
    # ORD-4290 (a low-confidence answer, 120 characters): the header and the first two rows, never ORD-4290's row
    header = "| 错误码 | 含义 | 处理建议 |\n| --- | --- | --- |\n"
    got = focused_snippet(CODES, 120, ["ord", "ord-4290"])
    assert got == header + "| ORD-4290 | 请求过于频繁（限流） | 每个应用每秒最多 50 次请求 |\n\n…"
    assert focused_snippet(CODES, 400, ["ord", "ord-4290"]) == CODES  # it fits: whole
    assert focused_snippet(CODES, 120, ["ord"]) == snippet(CODES, 120)  # every row holds as many terms: as before
    md = build_answer(
        "ORD-4290",
        "hybrid",
        [hit(CODES, "API > 错误码")],
        terms=["ord", "ord-4290"],
        snippet_chars=120,
    ).markdown
    assert "| ORD-4290 | 请求过于频繁（限流） | 每个应用每秒最多 50 次请求 |\n\n… (API > 错误码)" in md


def test_log_records_stay_one_per_line() -> None:
    # order-service.log: "…user_id=? 2024-05-20 10:07:02 ERROR [order-service] ORD-5000 …" (records run together)
    log = (
        "2024-05-20 10:05:44 WARN  [order-service] Slow SQL detected: 2310ms\n"
        "2024-05-20 10:07:02 ERROR [order-service] ORD-5000 Internal error\n2024-05-20T10:09:30 INFO recovered"
    )
    assert flatten(log) == log
    assert flatten("日志如下：\n" + log + "\n以上。") == "日志如下：\n\n" + log + "\n\n以上。"


def test_chinese_numbered_clauses_and_indented_continuations_stay_one_per_line() -> None:
    # 1、 （一） ① are how Chinese documents number clauses: they ran together as "…如下： 1、员工…； 2、部门…；"
    assert flatten("请假规定如下：\n1、提前三天申请；\n2、部门审批；\n3、人事备案。\n以上。") == (
        "请假规定如下：\n\n1、提前三天申请；\n2、部门审批；\n3、人事备案。\n\n以上。"
    )
    assert flatten("办法：\n（一）提交申请；\n（二）审批。") == "办法：\n\n（一）提交申请；\n（二）审批。"
    assert flatten("要求：\n①提交；\n②审批。") == "要求：\n\n①提交；\n②审批。"
    assert flatten("增长了\n3.5 倍，版本\n2.1 发布") == "增长了 3.5 倍，版本 2.1 发布"  # a number is no item
    # an item's indented wrapped line and a log record's stack frames stay with it (were split off or joined)
    assert flatten("- 大 Key 指 value 超过\n  10KB 的 key\n- 删除用 UNLINK") == (
        "- 大 Key 指 value 超过\n  10KB 的 key\n- 删除用 UNLINK"
    )
    log = "2024-05-20 10:07:02 ERROR x\n\tat com.a(A.java:1)\n\tat com.b(B.java:2)\n2024-05-20 10:08:00 INFO y"
    assert flatten(log) == log


def test_bracketed_and_nginx_log_records_stay_one_per_line() -> None:
    # "[2024-05-20 10:07:02] ERROR …" and nginx's "2024/05/20 10:07:02 [error] …" ran together in one paragraph
    app = "[2024-05-20 10:07:02] ERROR order failed\n[2024-05-20 10:07:03] INFO retried"
    nginx = "2024/05/20 10:07:02 [error] 12#12: upstream timed out\n2024/05/20 10:07:05 [warn] 12#12: retrying"
    assert flatten("日志：\n" + app) == "日志：\n\n" + app
    assert flatten(nginx) == nginx
    assert flatten("日期\n2024-05/20 10:07 不是记录") == "日期 2024-05/20 10:07 不是记录"  # mixed separators: prose


def test_an_indented_list_loses_its_common_indent_not_its_nesting() -> None:
    # a TXT notice indents its clauses four spaces: set off by a blank line, Markdown showed them as a code block
    assert (
        flatten("通知如下：\n    1、放假七天；\n    2、十月八日上班。")
        == "通知如下：\n\n1、放假七天；\n2、十月八日上班。"
    )
    assert flatten("说明：\n    - 甲\n      - 乙\n    - 丙") == "说明：\n\n- 甲\n  - 乙\n- 丙"
