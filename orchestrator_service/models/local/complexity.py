"""`complexity_classification` by structural cues (LOCAL_MODEL.md §1).

A question is complex when it carries one of these cues and splits into 2–4 parts:

| cue                | Chinese                       | English                        |
|--------------------|-------------------------------|--------------------------------|
| multiple_questions | several ？ / ；                | several ? / ;                  |
| comparison         | 比较 对比 区别 差异 异同 不同…  | compare contrast differ vs     |
| distribution       | 分别 各自 每个 各个             | each, respectively             |
| enumeration        | 、 和 与 及 以及 跟 或 还是      | "," "and" "or"                 |

Each part is completed with what the parts share: "比较A和B的X" → "A的X", "B的X"; a later
question's pronoun or missing subject takes the first question's subject. A question about a
relation between its items ("A和B的关系", "how do A and B interact") is one question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jieba

from orchestrator_service.models.local.text import is_chinese, words
from shared.trace_fields import MAX_SUB_QUESTIONS, Complexity

MAX_ITEM_CHARS_ZH = 16
MAX_ITEM_WORDS_EN = 5

ZH_COMPARISON = ("比较", "对比", "区别", "差异", "异同", "不同", "优缺点", "谁更", "哪个更", "相比")
ZH_DISTRIBUTION = ("分别", "各自", "每个", "各个")
ZH_CONJUNCTIONS = frozenset({"和", "与", "及", "以及", "跟", "同", "或", "或者", "还是", "、"})
ZH_RELATION = ("关系", "联系", "相互", "关联", "互相")
#: Tokens after which the rest of the first part is the first item ("咖啡因对|睡眠").
ZH_PREFIX_ENDERS = frozenset({"对", "在", "关于", "给", "从", "比较", "对比", "介绍", "说明"})
#: Where the shared tail of the last part starts ("红茶|的发酵程度", "B|是什么").
ZH_SUFFIX_STARTERS = frozenset(
    {"的", "是", "有", "怎么", "如何", "为什么", "多少", "需要", "应该", "能", "可以", "会", "在",
     "哪个", "谁", "分别", "各自"}
)  # fmt: skip
ZH_LEAD = re.compile(r"^(?:请|请问)?(?:比较|对比|介绍|说明|分析|讲讲|谈谈)?(?:一下)?")
ZH_COMPARISON_TAIL = re.compile(
    r"(?:有|存在)?(?:什么|哪些|何)?(?:的)?(?:区别|差异|不同|异同|优缺点|不同之处|相比)"
    r"(?:是什么|有哪些|在哪里|在哪|如何|怎么样)?[？?。！!]*$"
)
ZH_PRONOUN = re.compile(r"^(?:它们|它|其|他们|她们|他|她)(?:的)?")

EN_COMPARISON = re.compile(r"\b(?:compare|contrast|difference|differences|differ|versus|vs)\b")
EN_DISTRIBUTION = re.compile(r"\b(?:each|respectively)\b")
EN_RELATION = re.compile(r"\b(?:relationship|relation|interact|interacts|related|affect|affects)\b")
EN_SPLIT = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|vs\.?|versus)\s+", re.IGNORECASE)
#: Words after which the rest of the first part is the first item ("what is the cost of|Basic").
EN_PREFIX_ENDERS = words(
    "what which who how is are was were do does did of for about between compare contrast "
    "in on with from describe explain"
)
#: Words where the shared tail of the last part starts ("Premium| cost?").
EN_SUFFIX_STARTERS = words(
    "is are was were do does did has have handle handles in on for of at to with when "
    "during differ compare cost costs"
)
EN_COMPARISON_FRAMES = (
    re.compile(r"^(?:what\s+(?:is|are)\s+)?the\s+differences?\s+between\s+(?P<body>.+)$", re.I),
    re.compile(r"^how\s+(?:does|do|is|are)\s+(?P<body>.+?)\s+differs?\s+from\s+(?P<b>.+)$", re.I),
    re.compile(r"^(?:please\s+)?(?:compare|contrast)\s+(?P<body>.+)$", re.I),
    re.compile(r"^(?P<body>.+?\s(?:vs\.?|versus)\s.+)$", re.I),
)  # fmt: skip
EN_ATTRIBUTE = re.compile(
    r"^(?P<items>.+?)\s+(?:in\s+terms\s+of|regarding|on|in|for)\s+(?P<attr>.+)$"
)
EN_PRONOUN = re.compile(r"\b(?:it|its|they|their|them)\b", re.IGNORECASE)
EN_SUBJECT = re.compile(
    r"^(?:what|who|which|how|when|where|why)\s+(?:is|are|was|were)\s+(?P<subject>.+)$"
    r"|^(?:what|who|which|how|when|where|why)\s+(?:does|do|did)\s+(?P<doer>.+)\s+\S+$",
    re.IGNORECASE,
)
_ENDERS = "？?。.!！"


@dataclass(frozen=True, slots=True)
class Classification:
    complexity: Complexity
    reason: str
    sub_questions: list[str]


def classify(question: str) -> Classification:
    """simple, or complex with 2–4 sub-questions; the reason names the cue that decided."""
    text = re.sub(r"\s+", " ", question.strip())
    chinese = is_chinese(text)
    asks = split_asks(text)
    if len(asks) >= 2:
        return _complex("multiple_questions", complete_subjects(asks, chinese=chinese))
    lowered = text.lower()
    if chinese:
        relation = any(word in text for word in ZH_RELATION)
        cue = _first_cue(text, (("comparison", ZH_COMPARISON), ("distribution", ZH_DISTRIBUTION)))
        parts = split_items_zh(text, comparison=cue == "comparison")
    else:
        relation = bool(EN_RELATION.search(lowered))
        cue = (
            "comparison"
            if EN_COMPARISON.search(lowered)
            else "distribution"
            if EN_DISTRIBUTION.search(lowered)
            else None
        )
        parts = split_items_en(text, comparison=cue == "comparison")
    if relation and cue != "comparison":
        return Classification(
            Complexity.SIMPLE, "relation_between_items: one question about a relation", []
        )
    if len(parts) >= 2:
        return _complex(cue or "enumeration", parts)
    if cue:
        return Classification(Complexity.SIMPLE, f"{cue}_cue_without_items: nothing to split", [])
    return Classification(Complexity.SIMPLE, "no_split_cue: a single ask", [])


def _complex(cue: str, parts: list[str]) -> Classification:
    kept = parts[:MAX_SUB_QUESTIONS]
    note = f", first {MAX_SUB_QUESTIONS} of {len(parts)} kept" if len(parts) > len(kept) else ""
    return Classification(Complexity.COMPLEX, f"{cue}: {len(kept)} sub-questions{note}", kept)


def _first_cue(text: str, cues: tuple[tuple[str, tuple[str, ...]], ...]) -> str | None:
    return next((name for name, words in cues if any(word in text for word in words)), None)


def split_asks(text: str) -> list[str]:
    """Separate questions: split after each ？ / ? / ； / ; that has more text after it."""
    parts = [part.strip() for part in re.split(r"(?<=[？?；;])", text)]
    asks = [part.rstrip("；;").strip() for part in parts if len(part.strip("？?；; ")) >= 2]
    return asks if len(asks) >= 2 else [text]


def complete_subjects(asks: list[str], *, chinese: bool) -> list[str]:
    """Give later asks the first ask's subject when they lean on a pronoun or omit it."""
    subject = _subject_zh(asks[0]) if chinese else _subject_en(asks[0])
    if not subject:
        return asks
    completed = [asks[0]]
    for ask in asks[1:]:
        if chinese:
            if ZH_PRONOUN.match(ask):
                ask = ZH_PRONOUN.sub(f"{subject}的", ask, count=1)
            elif subject not in ask and "的" not in ask:
                ask = f"{subject}的{ask}"
        else:
            ask = EN_PRONOUN.sub(lambda match: _pronoun_for(match.group(), subject), ask)
        completed.append(ask)
    return completed


def _pronoun_for(pronoun: str, subject: str) -> str:
    return f"{subject}'s" if pronoun.lower() in ("its", "their") else subject


def _subject_zh(ask: str) -> str:
    head, found, _ = ask.partition("的")
    head = ZH_LEAD.sub("", head)
    return head if found and 0 < len(head) <= 12 else ""


def _subject_en(ask: str) -> str:
    match = EN_SUBJECT.match(ask.rstrip(_ENDERS).strip())
    if not match:
        return ""
    subject = (match.group("subject") or match.group("doer") or "").strip()
    return subject if 0 < len(subject.split()) <= MAX_ITEM_WORDS_EN else ""


# --- Chinese enumerations ---------------------------------------------------------------------


def split_items_zh(text: str, *, comparison: bool) -> list[str]:
    """ "比较A和B的X" → ["A的X", "B的X"]; "A、B和C分别是什么？" → ["A是什么？", …];
    "茶的历史和文化" → ["茶的历史", "茶的文化"]. [] when there is nothing to split."""
    core = ZH_COMPARISON_TAIL.sub("", text) if comparison else text
    core = ZH_LEAD.sub("", core)
    for word in ZH_DISTRIBUTION:
        core = core.replace(word, "")
    parts: list[list[str]] = [[]]
    for token in jieba.lcut(core):
        if token in ZH_CONJUNCTIONS:
            parts.append([])
        else:
            parts[-1].append(token)
    if len(parts) < 2 or any(not "".join(part).strip() for part in parts):
        return []
    if any(ZH_PRONOUN.match("".join(part).strip()) for part in parts[1:]):
        # "茶的历史以及它的冲泡方法": later parts are asks about the first part's subject.
        return complete_subjects(["".join(part).strip() for part in parts], chinese=True)
    first, last = parts[0], parts[-1]
    cut = next((i for i, t in enumerate(last) if t in ZH_SUFFIX_STARTERS and i > 0), len(last))
    suffix = "".join(last[cut:])
    lead_end = max((i + 1 for i, t in enumerate(first[:-1]) if t in ZH_PREFIX_ENDERS), default=0)
    prefix = "".join(first[:lead_end])
    items = [
        "".join(first[lead_end:]).strip(),
        *("".join(part).strip() for part in parts[1:-1]),
        "".join(last[:cut]).strip(),
    ]
    if "的" in first[lead_end:] and not suffix:
        # "茶的历史和文化": the parts are attributes of the first part's subject.
        owner = "".join(first[: first.index("的") + 1])
        return ["".join(first), *(owner + item for item in items[1:])]
    if any(not item or len(item) > MAX_ITEM_CHARS_ZH for item in items):
        return []
    if not suffix and comparison:
        suffix = "的特点是什么？"
    return [f"{prefix}{item}{suffix}" for item in items]


# --- English enumerations ---------------------------------------------------------------------


def split_items_en(text: str, *, comparison: bool) -> list[str]:
    """ "What is the difference between A and B?" → ["Describe A.", "Describe B."];
    "Compare A and B in terms of X" → ["What is the X of A?", …]; "What is the cost of A and
    B?" → ["What is the cost of A?", …]. [] when there is nothing to split."""
    body = text.rstrip(_ENDERS).strip()
    body = EN_DISTRIBUTION.sub("", body)
    body = re.sub(r"\s+", " ", body).strip(" ,")
    if comparison:
        for frame in EN_COMPARISON_FRAMES:
            match = frame.match(body)
            if match:
                found = match.groupdict()
                body = f"{found['body']} and {found['b']}" if found.get("b") else found["body"]
                return _comparison_items_en(body)
        body = re.sub(r"\b(?:difference|differences|differ)\b", "", body)
    parts = [part.strip() for part in EN_SPLIT.split(body) if part.strip()]
    if len(parts) < 2:
        return []
    first_words, last_words = parts[0].split(), parts[-1].split()
    lead_end = max(
        (i + 1 for i, w in enumerate(first_words[:-1]) if w.lower() in EN_PREFIX_ENDERS), default=0
    )
    cut = next(
        (i for i, w in enumerate(last_words) if w.lower() in EN_SUFFIX_STARTERS and i > 0),
        len(last_words),
    )
    prefix = " ".join(first_words[:lead_end])
    suffix = " ".join(last_words[cut:])
    items = [" ".join(first_words[lead_end:]), *parts[1:-1], " ".join(last_words[:cut])]
    if any(not item or len(item.split()) > MAX_ITEM_WORDS_EN for item in items):
        return []
    ender = "?" if text.rstrip().endswith("?") or prefix else "."
    return [" ".join(filter(None, (prefix, item, suffix))) + ender for item in items]


def _comparison_items_en(body: str) -> list[str]:
    attribute = EN_ATTRIBUTE.match(body)
    items_text, attr = (attribute["items"], attribute["attr"]) if attribute else (body, "")
    items = [part.strip() for part in EN_SPLIT.split(items_text) if part.strip()]
    if len(items) < 2 or any(len(item.split()) > MAX_ITEM_WORDS_EN for item in items):
        return []
    if attr:
        verb = "are" if attr.endswith("s") and not attr.endswith("ss") else "is"
        return [f"What {verb} the {_without_article(attr)} of {item}?" for item in items]
    return [f"Describe {item}." for item in items]


def _without_article(phrase: str) -> str:
    return re.sub(r"^(?:the|a|an)\s+", "", phrase, flags=re.IGNORECASE)
