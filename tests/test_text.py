from pathlib import Path

import pytest

from zhiku.errors import ConfigError
from zhiku.text import TextProcessor, char_pairs, load_stopwords


@pytest.fixture(scope="module")
def tp():
    return TextProcessor()


def test_normalize_nfkc_t2s_lower(tp):
    assert tp.normalize("勞動合同法ＧＰＴ－４　１２３") == "劳动合同法gpt-4 123"


def test_index_tokens_search_mode_mixed_scripts_then_character_pairs(tp):
    assert tp.index_tokens("《中华人民共和国劳动合同法》第三条：GPT-4 in 2024年") == [
        "中华",
        "华人",
        "人民",
        "共和",
        "共和国",
        "中华人民共和国",
        "劳动",
        "合同",
        "合同法",
        "第三",
        "三条",
        "第三条",
        "gpt",
        "gpt-4",
        "in",
        "2024",
        "年",
        "民共",  # the pairs of each Chinese run that are not words already
        "和国",
        "国劳",
        "动合",
        "同法",
    ]


def test_character_pairs_of_documents_and_questions(tp):
    assert char_pairs("带薪年休假，年休假5天", {"休假"}) == ["带薪", "薪年", "年休", "年休"]
    assert tp.words("职工带薪年休假") == ["职工", "带薪", "休假", "年休假"]
    assert tp.index_tokens("职工带薪年休假") == ["职工", "带薪", "休假", "年休假", "工带", "薪年", "年休"]
    # a question's pairs: not its terms, not stopwords (怎么), once each; 第47条 as statutes write it
    terms = tp.query_tokens("年休假没休完怎么补钱？")
    assert (terms, tp.query_pairs("年休假没休完怎么补钱？", terms)) == (
        ["休假", "年休假", "没休", "完", "补钱"],
        ["年休", "假没", "休完", "完怎", "么补"],
    )
    assert tp.query_pairs("第47条经济补偿", tp.query_tokens("第47条经济补偿")) == ["条经", "济补"]
    assert tp.identity.endswith(";lower;pairs")  # an index built without pairs is reported stale


def test_query_tokens_traditional_stopwords_distinct(tp):
    assert tp.query_tokens("請問勞動合同解除後怎麼辦？勞動合同") == ["劳动", "合同", "劳动合同", "解除", "后"]


def test_query_compounds_are_split_like_the_index(tp):
    # precise mode would keep 拖欠工资 whole, which a document saying 拖欠劳动者的工资 never indexes
    assert tp.query_tokens("拖欠工资怎么办") == ["拖欠", "工资", "拖欠工资"]
    assert {"拖欠", "工资"} <= set(tp.index_tokens("无故拖欠劳动者的工资"))


def test_query_of_only_stopwords_keeps_them(tp):
    assert tp.query_tokens("什么") == ["什么"]


def test_user_dictionary_changes_segmentation_and_identity(tmp_path: Path):
    plain = TextProcessor()
    assert plain.query_tokens("竞业限制补偿金") == ["竞业", "限制", "补偿", "补偿金"]
    d = tmp_path / "user.dict"
    d.write_text("竞业限制补偿金 10 n\n", encoding="utf-8")
    custom = TextProcessor(user_dict=d)
    assert custom.query_tokens("竞业限制补偿金") == ["限制", "补偿", "补偿金", "竞业限制补偿金"]
    assert custom.identity != plain.identity
    assert "userdict=none" in plain.identity


def test_bad_user_dictionary_is_a_config_error(tmp_path: Path):
    d = tmp_path / "bad.dict"
    d.write_text("词语 lots\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 1: frequency 'lots' is not a number"):
        TextProcessor(user_dict=d).query_tokens("词语")
    with pytest.raises(ConfigError, match="cannot read user dictionary"):
        TextProcessor(user_dict=tmp_path / "missing.dict")


def test_builtin_stopwords():
    assert {"的", "请问", "怎么办", "the"} <= load_stopwords()


SYNONYMS = "# 口语 ↔ 书面\n开除 辞退 解除劳动合同\n社保，社会保险\n年假/年休假\n"


def test_synonyms_expand_query_terms(tmp_path: Path):
    path = tmp_path / "synonyms.txt"
    path.write_text(SYNONYMS, encoding="utf-8")
    tp = TextProcessor(synonyms=path)
    assert tp.query_tokens("公司开除我") == ["公司", "开除", "解除", "劳动", "合同", "劳动合同", "辞退"]
    assert tp.query_tokens("沒交社保") == ["交", "社保", "社会", "保险", "社会保险"]  # after t2s
    assert tp.query_tokens("加班费") == TextProcessor().query_tokens("加班费")  # no group mentioned
    assert tp.index_tokens("用人单位解除劳动合同") == TextProcessor().index_tokens("用人单位解除劳动合同")
    assert tp.identity == TextProcessor().identity  # query-time expansion does not change the index


def test_bad_synonyms_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read synonyms file .*fix text.synonyms"):
        TextProcessor(synonyms=tmp_path / "missing.txt")
    path = tmp_path / "one.txt"
    path.write_text("开除 辞退\n社保\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"line 2: '社保' has one term"):
        TextProcessor(synonyms=path)


def test_query_clauses_cuts_a_long_question_at_clause_punctuation() -> None:
    from zhiku.text import query_clauses

    q = "甲状腺结节什么食物吃的安心，我的脖子肿了点，不痛不痒的。就是有一些小硬块? 怎么办"
    assert query_clauses(q) == [
        "甲状腺结节什么食物吃的安心",
        "我的脖子肿了点",
        "不痛不痒的",
        "就是有一些小硬块，怎么办",
    ]
    # a piece under 4 characters joins the one before it (a short first piece, the next one)
    assert query_clauses("好的，谢谢，请问试用期最长多久？") == ["好的，谢谢", "请问试用期最长多久"]
    assert query_clauses("试用期最长多久？") == []  # one clause: the question is the clause
    assert query_clauses("  ") == []
    assert query_clauses("一二三四；五六七八；九十百千", max_clauses=2) == ["一二三四", "五六七八"]
    assert query_clauses("一二三四；五六七八", min_chars=5) == []  # the two pieces joined: one clause


def test_query_clauses_keep_english_words_and_numbers_together() -> None:
    from zhiku.text import query_clauses

    assert query_clauses("what is the minimum wage in Beijing") == []  # one English clause, not four
    assert query_clauses("Is overtime paid? How much per hour?") == ["Is overtime paid", "How much per hour"]
    assert query_clauses("《Go车志 BuyCarTV》的创办人是谁？") == []  # a space inside a mixed name is no break
    assert query_clauses("月薪1,000.5元,试用期工资多少？公司不给怎么办") == [
        "月薪1,000.5元",
        "试用期工资多少",
        "公司不给怎么办",
    ]
    assert query_clauses("头疼得厉害 一直发烧 怎么办") == ["头疼得厉害", "一直发烧，怎么办"]
    assert query_clauses("劳动法 第 39 条 规定了什么情况") == ["劳动法，第 39 条", "规定了什么情况"]


def test_article_numbers_in_digits_are_spelled_as_statutes_write_them() -> None:
    from zhiku.text import article_numbers, chinese_number

    assert [chinese_number(n) for n in (1, 10, 12, 20, 47, 100, 101, 110, 119, 200, 1001, 1010, 2345)] == [
        "一", "十", "十二", "二十", "四十七", "一百", "一百零一", "一百一十", "一百一十九", "二百", "一千零一",
        "一千零一十", "二千三百四十五",
    ]  # fmt: skip
    assert article_numbers("劳动合同法第47条和第 100 条") == "劳动合同法第四十七条和第一百条"
    assert article_numbers("第0条、第2项、第12345条、47条") == "第0条、第2项、第12345条、47条"  # left as they are
    terms = TextProcessor().query_tokens("劳动合同法第４７条")  # (full-width digits: NFKC first)
    assert "47" in terms and "第四十七条" in terms
    assert set(TextProcessor().query_tokens("第四十七条")) <= set(terms)  # every term of the spelled article
    # the typed form's 第 and 条, in every article, do not dilute them (劳动法第100条 ranked 第一百零六条 first)
    assert TextProcessor().query_tokens("劳动法第100条") == ["劳动", "劳动法", "第一", "百条", "100"]
    # a number of one digit is kept as well (a document numbering its articles 第7条 indexes 7, not 第七条)
    assert TextProcessor().query_tokens("第7条") == ["第七", "七条", "第七条", "7"]


def test_passages_normalised_one_by_one_equal_them_normalised_joined() -> None:
    """The confidence check normalises each passage on its own (kept for the next query that returns it) and joins
    them: the same text as normalising the joined passages, also where a passage's edge could combine or change
    case with its neighbour's (a combining mark, a final sigma, ligatures, full-width letters, Traditional phrases)."""
    tp = TextProcessor()
    pieces = [
        "ΑΣ",
        "Σ",
        "aΣ",
        "e\u0301",
        "\u0301x",
        "ﬁ",
        "Ⅻ",
        "㍿",
        "①②",
        "ＡＢＣ",
        "乾隆年間",
        "著名",
        "後來發現",
        "\u1100\u1161",
    ]
    for a in pieces:
        for b in pieces:
            assert tp.normalize(f"{a}\n{b}") == f"{tp.normalize(a)}\n{tp.normalize(b)}", (a, b)
    assert tp.normalize("後來發現ΑΣ") == "后来发现ας"
