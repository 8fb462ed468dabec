"""Measure keyword search over international text as a user meets it, on both backends.

    PYTHONPATH=src:. python tools/intl_audit.py [--backends sqlite,postgres] [--json OUT]

One real server per backend (SQLite home; PostgreSQL for the index, catalog and cell store,
`tests/pg.py`), the hash embedder (so the meaning side finds nothing by chance: a hit is
a keyword hit). Every sentence of `CORPUS` is an episode of one scope, a fact citing it
and an AMP cell; each query is a word inside one sentence, often spelled another way (NFD
for NFC, upper case, without accents, full-width). A query counts as found when its
sentence is in the top 5 of `POST /query` (passages), `POST /search` (facts, by the fact's
value and quote) and `POST /amp/v1/memories/search` (cells), each with a keyword part above
zero where the answer shows one, for cells a keyword hit by the cell store itself
(``--embedder wordllama``: what a user of the default
embedder meets, a hit by meaning alone counting too). Prints recall@5 per group and
backend.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import unicodedata
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.memory_support import QUIET, Memory, serving  # noqa: E402
from tests.pg import postgres_factory  # noqa: E402


def nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


# (group, sentence, query): the query is a word of the sentence as a user would type it.
CORPUS: list[tuple[str, str, str]] = [
    ("zh", "我昨天在北京买了一台新电脑", "电脑"),
    ("zh", "今天的天气非常好，我们去公园散步吧", "公园"),
    ("zh", "她的妹妹在上海大学学习医学", "医学"),
    ("zh", "这家餐厅的饺子特别好吃", "饺子"),
    ("zh", "下个月我们要去杭州旅游", "杭州"),
    ("zh", "请把会议改到星期五下午三点", "会议"),
    ("zh", "我的猫喜欢睡在窗台上", "猫"),
    ("zh", "项目预算已经超过了五十万", "预算"),
    ("ja", "東京の天気は今日とても良いです", "天気"),
    ("ja", "昨日、新しいコンピューターを買いました", "コンピューター"),
    ("ja", "田中さんは来週大阪へ出張します", "出張"),
    ("ja", "この寿司屋はとても人気があります", "寿司"),
    ("ja", "会議の資料をメールで送ってください", "資料"),
    ("ja", "私の趣味は写真を撮ることです", "写真"),
    ("ja", "駅の近くに新しい図書館ができた", "図書館"),
    ("ja", "ラーメンが大好きです", "ラーメン"),
    ("th", "ฉันชอบกินข้าวผัดมาก", "ข้าวผัด"),
    ("th", "พรุ่งนี้เราจะไปเที่ยวเชียงใหม่", "เชียงใหม่"),
    ("th", "ประชุมครั้งต่อไปวันศุกร์", "ประชุม"),
    ("th", "แมวของฉันนอนบนโซฟา", "แมว"),
    ("th", "งบประมาณโครงการเกินแล้ว", "งบประมาณ"),
    ("th", "เธอทำงานที่โรงพยาบาลกรุงเทพ", "โรงพยาบาล"),
    ("ko", "서울에서 친구를 만났습니다", "서울"),
    ("ko", "회의는 금요일 오후에 있습니다", "회의"),
    ("ko", "어제 일찍 집에 갔어요", "집"),
    # questions as a user asks them, not the stored word alone
    ("zh-q", "王经理下周二要去深圳见客户", "王经理什么时候去深圳？"),
    ("zh-q", "我们的服务器每天凌晨两点备份", "服务器几点备份"),
    ("ja-q", "山田さんの誕生日は三月十日です", "山田さんの誕生日はいつですか"),
    ("ja-q", "新しいオフィスは渋谷駅の近くにあります", "オフィスはどこ？"),
    ("th-q", "คุณสมชายจะเดินทางไปภูเก็ตสัปดาห์หน้า", "สมชายไปไหน"),
    ("tr", "İstanbul'da yeni bir ofis açtık", "istanbul"),
    ("tr", "IRMAK kenarında yürüdük", "ırmak"),
    ("tr", "Şirketin bütçesi arttı", "şirketin"),
    ("de", "Die Straße vor dem Büro ist gesperrt", "STRASSE"),
    ("de", "Wir treffen uns an der Großen Mauer", "GROSSEN"),
    ("de", "Die Prüfung war am Montag", "prufung"),
    ("el", "Η ΟΔΟΣ είναι κλειστή σήμερα", "οδός"),
    ("el", "Το γραφείο μας είναι στην Αθήνα", "αθηνα"),
    ("accents", "We met at the café near the station", "cafe"),
    ("accents", "Elle a visité le musée d'Orsay", "musee"),
    ("accents", "The resume listed her naïve approach", "naïve"),
    ("accents", "El niño comió piñata dulce", "nino"),
    ("fullwidth", "注文番号はＡＢＣ１２３です", "ABC123"),
    ("fullwidth", "Order ABC789 shipped on Tuesday", "ＡＢＣ７８９"),
    ("nfd", nfd("Renée booked the hôtel in Zürich"), "Zürich"),
    ("nfd", "Renée booked the chalet in Genève", nfd("Genève")),
    ("nfd", nfd("Ein Treffen in München am Dienstag"), nfd("München")),
    ("nfd", nfd("한국어 문서를 저장했습니다"), "문서"),
    ("rtl", "مرحبا بكم في مكتبنا الجديد في دبي", "دبي"),
    ("rtl", "שלום, הפגישה בתל אביב מחר", "אביב"),
    ("rtl", "الاجتماع يوم الخميس", "الخميس"),
    ("rtl", "שָׁלוֹם עֲלֵיכֶם חברים", "שלום"),
    ("mixed", "Launch 🚀 of Projekt Ωmega with 田中 and أحمد", "Ωmega"),
    ("mixed", "Family 👨‍👩‍👧 trip to Kraków in spring", "krakow"),
    ("indic", "हिन्दी भाषा में दस्तावेज़ सहेजा गया", "दस्तावेज़"),
    ("indic", "मुंबई में बैठक सोमवार को है", "मुंबई"),
]

# Distractors: sentences that share scripts but not the queried words.
NOISE = [
    "我们明天开会讨论新的计划", "今天下午我去超市买水果", "東京駅で友達に会いました",
    "明日は雨が降るそうです", "วันนี้อากาศร้อนมาก", "เราไปตลาดกันเถอะ",
    "The weekly report is ready", "Meeting notes from Monday", "بيت جديد في المدينة",
    "אנחנו הולכים לים", "Die Besprechung ist morgen", "Η συνάντηση είναι αύριο",
]


# Distractors by template, `--noise` of each (Chinese, Japanese, Thai): everyday sentences
# of the same scripts that hold none of the queried words.
TEMPLATES = [
    ("{0}在{1}{2}{3}", ["老李", "小王", "张老师", "我妈妈", "同事们"],
     ["办公室", "学校", "家里", "超市", "机场", "火车站"],
     ["讨论了", "看见了", "准备了", "忘记了", "需要"],
     ["报告", "合同", "手机", "咖啡", "雨伞", "钥匙", "文件", "礼物"]),
    ("{0}は{1}で{3}を{2}", ["佐藤さん", "鈴木さん", "母", "先生", "同僚"],
     ["会社", "学校", "家", "空港", "銀行", "公園"],
     ["見ました", "忘れました", "探しています", "持っています", "買いました"],
     ["本", "傘", "鍵", "書類", "手紙", "弁当", "切符", "財布"]),
    ("{0}{2}{3}ที่{1}", ["พ่อ", "แม่", "ครู", "เพื่อน", "หมอ"],
     ["บ้าน", "โรงเรียน", "ตลาด", "สนามบิน", "สำนักงาน"],
     ["ซื้อ", "ลืม", "หา", "เห็น"], ["กระเป๋า", "หนังสือ", "โทรศัพท์", "ร่ม", "กุญแจ", "เสื้อ"]),
]


def noise(each: int) -> list[str]:
    pick = random.Random(0)
    queries = [q for _, _, q in CORPUS]
    out: list[str] = []
    for form, *parts in TEMPLATES:
        made = sorted({form.format(*w) for w in itertools.product(*parts)})
        made = [m for m in made if not any(q in m for q in queries)]
        out += pick.sample(made, min(each, len(made)))
    return out


def _batched(http: Any, path: str, key: str, items: list[Any], scope: str) -> list[Any]:
    out: list[Any] = []
    for start in range(0, len(items), 200):
        r = http.post(path, json={"scope": scope, key: items[start:start + 200]})
        assert r.status_code == 201, r.text
        out += r.json().get(key, [])
    return out


def cell_keyword_hits(store_uri: str, owner: str, cells: list[str],
                      queries: list[str]) -> dict[str, list[int]]:
    """Each query's keyword hits among the owner's cells, by corpus number, best first
    (ties by number), from the cell store itself (the HTTP answer shows no keyword
    part), searched with the words the AMP service searches with."""
    from ampup_memory.amp import service
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.registry import open_store

    terms_of = getattr(service, "keyword_terms", None) or service.query_terms
    num = {c: n for n, c in enumerate(cells)}
    store = open_store(store_uri, None)
    try:
        out = {}
        for query in queries:
            hits = store.search_candidates(CellFilter(agent_id="a1", owner_id=owner),
                                           terms_of(query), None, 100)
            out[query] = [num[h.cell_id] for h in sorted(
                (h for h in hits if h.keyword > 0), key=lambda h: (-h.keyword, num[h.cell_id]))]
        return out
    finally:
        store.close()


def run(url: str, scope: str, keyword: bool, extra: list[str],
        store_uri: str) -> dict[str, Any]:
    alice = Memory(url, "alice")
    http = alice.http
    bodies = [s for _, s, _ in CORPUS] + NOISE + extra
    ids = [e["id"] for e in _batched(http, "/episodes/batch", "episodes", [
        {"source": f"doc:s{i}", "body": b, "acl": ["*"]} for i, b in enumerate(bodies)],
        scope)]
    # A fact per sentence of CORPUS and per distractor (whose episodes follow NOISE's).
    cited = [(f"note:{i}", s, ids[i]) for i, (_, s, _) in enumerate(CORPUS)] + [
        (f"noise:{n}", s, ids[len(CORPUS) + len(NOISE) + n]) for n, s in enumerate(extra)]
    _batched(http, "/facts/batch", "facts", [
        {"entity": entity, "predicate": "says", "value": unicodedata.normalize("NFC", s)[:40],
         "quote": s, "cites": [{"episode": episode, "unit": 1}]}
        for entity, s, episode in cited], scope)
    owner = "u_" + uuid.uuid4().hex[:8]
    cells: list[str] = []
    for b in bodies:
        r = http.post("/amp/v1/memories", headers={"X-AMP-Agent-ID": "a1"}, json={
            "type": "semantic", "content": {"text": b},
            "identity": {"owner_id": owner, "owner_type": "user"}})
        assert r.status_code == 201, r.text
        cells.append(r.json()["id"])
    found: dict[str, Any] = {"lists": {}}
    found["cell lists"] = cell_keyword_hits(store_uri, owner, cells, [q for _, _, q in CORPUS])
    num = {e: n for n, e in enumerate(ids)}
    for i, (group, _, query) in enumerate(CORPUS):
        per = found.setdefault(group, {"passages": [], "facts": [], "cells": []})
        r = http.post("/query", json={"scope": scope, "find": "passages", "query": query,
                                      "limit": 5})
        assert r.status_code == 200, r.text
        # the keyword hits, by corpus number, for the backends' comparison
        found["lists"][query] = [num[p["episode"]] for p in r.json()["results"]
                                 if p["parts"]["keyword"] > 0]
        per["passages"].append(int(any(
            p["episode"] == ids[i] and (p["parts"]["keyword"] > 0 or not keyword)
            for p in r.json()["results"][:5])))
        r = http.post("/search", json={"scope": scope, "query": query, "limit": 5})
        assert r.status_code == 200, r.text
        found["lists"]["facts: " + query] = [f["entity"] for f in r.json()["results"]
                                             if f["parts"]["keyword"] > 0]
        per["facts"].append(int(any(
            f["entity"] == f"note:{i}" and (f["parts"]["keyword"] > 0 or not keyword)
            for f in r.json()["results"][:5])))
        r = http.post("/amp/v1/memories/search", headers={"X-AMP-Agent-ID": "a1"}, json={
            "query": query, "owner_id": owner, "limit": 5})
        assert r.status_code == 200, r.text
        per["cells"].append(int(cells[i] in [c["id"] for c in r.json()["results"][:5]] and (
            i in found["cell lists"][query] or not keyword)))
    alice.close()
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--noise", type=int, default=0, help="distractor sentences of"
                        " each of Chinese, Japanese and Thai (at most 1,200, 1,200, 600)")
    parser.add_argument("--embedder", default="hash", help="AMP_EMBEDDING_PROVIDER; with"
                        " another than hash a hit by meaning alone counts too")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with ExitStack() as stack:
        pg = None
        for backend in args.backends.split(","):
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="intl-")))
            env = {**QUIET, "AMP_EMBEDDING_PROVIDER": args.embedder}
            store_uri = f"sqlite:///{home / 'amp.db'}"
            if backend == "postgres":
                pg = pg or stack.enter_context(postgres_factory())
                url = pg.new_database("intl")
                env |= {"AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url,
                        "AMP_STORE_URI": url}
                store_uri = url
            with serving(home, env) as proc:
                results[backend] = run(proc.url, f"intl{uuid.uuid4().hex[:8]}/t",
                                       args.embedder == "hash", noise(args.noise), store_uri)
    groups = list(dict.fromkeys(g for g, _, _ in CORPUS))
    print(f"{'group':10} {'n':>3} " + " ".join(
        f"{b[:6]}:{k[:4]:>4}" for b in results for k in ("passages", "facts", "cells")))
    for g in groups:
        n = sum(1 for x, _, _ in CORPUS if x == g)
        cols = [f"{sum(results[b][g][k])}/{n}".rjust(11) for b in results
                for k in ("passages", "facts", "cells")]
        print(f"{g:10} {n:>3} " + " ".join(cols))
    if len(results) == 2:
        a, b = (results[k]["lists"] for k in results)
        differ = {q: (a[q], b[q]) for q in a if a[q] != b[q]}
        print(f"keyword hit lists (passages, facts) that differ between the backends: {len(differ)}"
              f" of {len(a)}")
        for q, (x, y) in differ.items():
            print(f"  {q!r}: {x} vs {y}")
        # The cells' lists: every keyword hit (up to 100) as a set, and the first 5 in
        # order, as the passages' lists are (each backend's BM25 counts a cell's length
        # its own way, so near ties deep in a long list may swap).
        a, b = (results[k]["cell lists"] for k in results)
        differ = {q: (a[q], b[q]) for q in a
                  if set(a[q]) != set(b[q]) or a[q][:5] != b[q][:5]}
        ordered = sum(1 for q in a if a[q] != b[q])
        print(f"AMP cell keyword hit lists that differ between the backends: {len(differ)}"
              f" of {len(a)} (as sets or in their first 5; in full order: {ordered})")
        for q, (x, y) in differ.items():
            print(f"  {q!r}: {x} vs {y}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
