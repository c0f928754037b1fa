"""Generation metrics through an LLM judge, against a fake OpenAI-compatible endpoint on 127.0.0.1."""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from zhiku.cli.app import app
from zhiku.evaluation.datasets import load_yaml_set
from zhiku.evaluation.generation import (
    JudgeClient,
    JudgeError,
    average_precision,
    judge_generation,
    parse_json_object,
    skipped,
)
from zhiku.llm import ReplyCache

SET = """\
version: 1
queries:
  - query: 试用期最长多久
    expected: [{source: 劳动合同法.md}]
  - query: 坏回答的问题：经济补偿
    expected: [{source: 劳动合同法.md}]
"""


class FakeJudge:
    """Deterministic replies by prompt kind; a question with 坏 gets malformed JSON for faithfulness."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.auth.append(self.headers.get("Authorization"))
                if self.path != "/v1/chat/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                system, user = body["messages"][0]["content"], body["messages"][1]["content"]
                content = outer.reply(system, user)
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reply(self, system: str, user: str) -> str:
        if system.startswith("[faithfulness]"):
            if "坏" in user:
                return '{"claims": [{"claim": "x", "supported": tru'  # cut off: not JSON
            claims = [
                {"claim": "a", "supported": True},
                {"claim": "b", "supported": False},
                {"claim": "c", "supported": True},
            ]
            return "```json\n" + json.dumps({"claims": claims}) + "\n```"
        if system.startswith("[answer_relevancy]"):
            question = re.search(r"\*\*检索问题 / Query:\*\* (.+)", user).group(1).strip()
            return json.dumps({"questions": [question, question]}, ensure_ascii=False)
        if system.startswith("[context_precision]"):
            n = user.count("PASSAGE [")
            return "verdicts follow: " + json.dumps({"verdicts": [1 if i % 2 == 0 else 0 for i in range(n)]})
        return "{}"


@pytest.fixture
def fake_judge() -> Iterator[FakeJudge]:
    fake = FakeJudge()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_parse_json_and_urls() -> None:
    assert parse_json_object('好的：{"a": 1} 完') == {"a": 1}
    assert parse_json_object('```json\n{"a": [1]}\n```') == {"a": [1]}
    with pytest.raises(JudgeError, match="did not reply with JSON"):
        parse_json_object('{"a": ')
    with pytest.raises(JudgeError, match="not an object"):
        parse_json_object("[1, 2]")
    assert JudgeClient("http://127.0.0.1:8000", "m").url == "http://127.0.0.1:8000/v1/chat/completions"
    assert JudgeClient("http://127.0.0.1:8000/v1/", "m").url == "http://127.0.0.1:8000/v1/chat/completions"
    assert average_precision([1, 0, 1]) == (1 + 2 / 3) / 2
    assert average_precision([0, 0]) == 0.0


def test_generation_metrics_cache_and_malformed_replies(
    fake_judge: FakeJudge, kb_factory, corpus: Path, tmp_path: Path
) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    (tmp_path / "g.yaml").write_text(SET, encoding="utf-8")
    evalset = load_yaml_set(tmp_path / "g.yaml")
    judge = JudgeClient(fake_judge.url, "judge-model", api_key="sk-test", cache=ReplyCache(tmp_path / "judge.sqlite"))
    result = judge_generation(kb, evalset, judge, mode="bm25", top_k=3)
    good, bad = result.per_query
    assert good.faithfulness == pytest.approx(2 / 3)
    assert good.answer_relevancy == pytest.approx(1.0, abs=1e-5)  # the judge's questions are the question itself
    n_hits = len(kb.retrieve("试用期最长多久", top_k=3, mode="bm25").hits)
    assert good.context_precision == average_precision([1 if i % 2 == 0 else 0 for i in range(n_hits)])
    assert bad.faithfulness is None and bad.errors[0].startswith("faithfulness: the judge did not reply with JSON")
    assert bad.answer_relevancy is not None and bad.context_precision is not None
    assert result.status == "ok" and result.errors == 1 and result.judge_calls == 6
    assert result.metrics["faithfulness"] == pytest.approx(2 / 3)  # mean over the scored query only
    assert fake_judge.auth[0] == "Bearer sk-test"
    assert fake_judge.requests[0]["model"] == "judge-model" and fake_judge.requests[0]["temperature"] == 0

    again = judge_generation(kb, evalset, judge, mode="bm25", top_k=3)
    assert again.judge_calls == 1  # only the malformed reply (never cached) is asked again
    assert [s.faithfulness for s in again.per_query] == [s.faithfulness for s in result.per_query]


def test_unreachable_judge_and_http_errors(fake_judge: FakeJudge) -> None:
    with pytest.raises(JudgeError, match="answered HTTP 404"):
        JudgeClient(fake_judge.url + "/other", "m")._post([{"role": "user", "content": "x"}])
    port = fake_judge.server.server_address[1]
    fake_judge.server.shutdown()
    fake_judge.server.server_close()
    with pytest.raises(JudgeError, match=f"cannot reach the judge at http://127.0.0.1:{port}/v1/chat/completions"):
        JudgeClient(f"http://127.0.0.1:{port}", "m", timeout=2).ask("s", "u")


def test_a_judge_that_never_answers_is_not_asked_for_every_metric(fake_openai) -> None:  # noqa: ANN001
    from zhiku.evaluation.generation import BREAKER

    fake_openai.always = ("status", 503, {}, '{"error": {"message": "overloaded"}}')  # a judge that is down
    judge = JudgeClient(fake_openai.url, "m", timeout=5)
    reasons = []
    for i in range(BREAKER + 4):
        with pytest.raises(JudgeError) as e:
            judge.ask("s", f"问题{i}")
        reasons.append(str(e.value))
    assert (judge.calls, len(fake_openai.requests)) == (BREAKER, BREAKER * 3)  # each call: 1 try + 2 retries
    url = f"{fake_openai.url}/chat/completions"
    down = f"cannot reach the judge at {url}: {url} failed after 3 attempt(s): HTTP 503: overloaded"
    assert reasons[:BREAKER] == [f"{down} (check judge.base_url)"] * BREAKER
    assert reasons[BREAKER:] == [f"not sent: the judge failed {BREAKER} calls in a row (last: {down})"] * 4


def test_eval_cli_with_and_without_a_judge(
    fake_judge: FakeJudge,
    monkeypatch: pytest.MonkeyPatch,
    kb_factory,
    corpus: Path,
    tmp_path: Path,
    embed_cache_dir: Path,
) -> None:
    kb_factory(tmp_path / "idx").ingest([corpus])
    dataset = tmp_path / "g.yaml"
    dataset.write_text(SET, encoding="utf-8")
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    args = ["eval", "--dataset", str(dataset), "--index", str(tmp_path / "idx"), "--mode", "bm25"]

    plain = runner.invoke(app, [*args, "--out", str(tmp_path / "o1")], catch_exceptions=False)
    assert plain.exit_code == 0, plain.output
    gen = json.loads((tmp_path / "o1" / "summary.json").read_text(encoding="utf-8"))["generation"]
    assert gen["status"] == "skipped" and gen["reason"] == skipped().reason
    refused = runner.invoke(app, [*args, "--judge"], catch_exceptions=False)
    assert refused.exit_code == 1 and refused.stderr.startswith("error: --judge needs an LLM judge")

    env = {
        "ZHIKU_JUDGE__BASE_URL": fake_judge.url,
        "ZHIKU_JUDGE__MODEL": "judge-model",
        "ZHIKU_JUDGE__API_KEY_ENV": "FAKE_JUDGE_KEY",
        "FAKE_JUDGE_KEY": "sk-cli",
    }
    judged = runner.invoke(app, [*args, "--out", str(tmp_path / "o2")], env=env, catch_exceptions=False)
    assert judged.exit_code == 0, judged.output
    assert "generation (LLM judge): faithfulness 0.6667" in judged.stdout and "2 queries, 1 unscored" in judged.stdout
    assert [ln for ln in judged.stderr.splitlines() if ln.startswith("judge error")] == [
        "judge error ×1: the judge did not reply with JSON (Expecting value at char 40): "
        '\'{"claims": [{"claim": "x", "supported": tru\''
    ]  # why it is unscored, not only how many
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text(encoding="utf-8"))
    assert summary["generation"]["status"] == "ok" and math.isclose(
        summary["generation"]["metrics"]["faithfulness"], 0.6667
    )
    report = (tmp_path / "o2" / "report.md").read_text(encoding="utf-8")
    assert "## Generation (LLM judge)" in report and "\n- judge error ×1: the judge did not reply with JSON" in report
    assert fake_judge.auth[-1] == "Bearer sk-cli"
    assert (embed_cache_dir / "judge.sqlite").is_file()

    no_key = runner.invoke(app, args, env={**env, "FAKE_JUDGE_KEY": ""}, catch_exceptions=False)
    assert no_key.exit_code == 1
    assert no_key.stderr == "error: judge.api_key_env names FAKE_JUDGE_KEY, but that environment variable is empty\n"
