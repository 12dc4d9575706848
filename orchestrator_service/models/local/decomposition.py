"""How the local classifier cuts a complex question into its parts (LOCAL_MODEL.md §1):
separate asks, clauses that are asks, two predicates, and enumerations of items in Chinese and
English. `complexity.classify` decides which cue applies and calls these.

Every part is a self-contained ask: it takes what the parts share ("比较A和B的X" → "A的X",
"B的X"; "the price and the capacity of X" → "the price of X", …), and a later clause's
pronoun, missing subject or "B呢" takes the first clause's subject.
"""

from __future__ import annotations

import re

import jieba
import jieba.posseg

from orchestrator_service.models.local.text import words

MAX_ITEM_CHARS_ZH = 16
MAX_ITEM_WORDS_EN = 5

ZH_DISTRIBUTION = ("分别", "各自", "每个", "各个")
ZH_CONJUNCTIONS = frozenset({"和", "与", "及", "以及", "跟", "同", "或", "或者", "还是", "、"})
#: Words that make a clause an ask; two asks joined by ，/以及/并且 are two questions.
ZH_INTERROGATIVES = (
    "什么", "如何", "怎么", "怎样", "为什么", "为何", "多少", "多久", "哪", "谁", "几", "吗",
    "是否", "能否", "呢",
)  # fmt: skip
ZH_CLAUSE_JOINTS = re.compile(r"\s*(?:，|,|以及|并且|同时)\s*")
#: Tokens after which the rest of the first part is the first item ("咖啡因对|睡眠").
ZH_PREFIX_ENDERS = frozenset({"对", "在", "关于", "给", "从", "比较", "对比", "介绍", "说明"})
#: Where the shared tail of the last part starts ("红茶|的发酵程度", "B|是什么").
ZH_SUFFIX_STARTERS = frozenset(
    {"的", "是", "有", "怎么", "如何", "为什么", "多少", "需要", "应该", "能", "可以", "会", "在",
     "哪个", "谁", "分别", "各自", "？", "?", "。", "！", "!"}
)  # fmt: skip
#: Tokens that end a first item read backwards ("需要多少|水").
ZH_ITEM_BOUNDARIES = ZH_SUFFIX_STARTERS | ZH_PREFIX_ENDERS | {"多少", "哪些", "什么"}
ZH_LEAD = re.compile(r"^(?:请|请问)?(?:比较|对比|介绍|说明|分析|讲讲|谈谈)?(?:一下)?")
ZH_COMPARISON_TAIL = re.compile(
    r"(?:有|存在)?(?:什么|哪些|何)?(?:的)?(?:区别|差异|不同|异同|优缺点|不同之处|相比)"
    r"(?:是什么|有哪些|在哪里|在哪|如何|怎么样)?[？?。！!]*$"
)
ZH_PRONOUN = re.compile(r"^(?:它们|它|其|他们|她们|他|她)(?P<of>的)?")
ZH_ENDERS = "？?。！!"

EN_DISTRIBUTION = re.compile(r"\b(?:each|respectively)\b")
EN_SPLIT = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|vs\.?|versus)\s+", re.IGNORECASE)
EN_ASK_START = (
    r"(?:how|what|why|when|where|who|whom|whose|which|does|do|did|is|are|was|were|can|could|"
    r"will|would|should|has|have|had)\b"
)
#: "…, and how …" / "… and does it …": a second ask starts after the conjunction.
EN_CLAUSE_JOINT = re.compile(rf"\s*,\s*(?:and\s+)?(?={EN_ASK_START})|\s+and\s+(?={EN_ASK_START})")
#: "How do I install and configure X": two verbs share a short subject and the object.
EN_PREDICATES = re.compile(
    r"^(?P<lead>(?i:(?:how|why|when|where|what)\s+)?(?i:do|does|did|can|could|should|would|will)"
    r"\s+(?:I|you|we|they|[A-Z][\w.-]*|(?i:the)\s+\w+))\s+(?P<v1>[a-z]+)\s+and\s+"
    r"(?P<v2>[a-z]+)\s+(?P<rest>.+)$"
)
EN_COMPARATIVE_FRAMES = (
    re.compile(
        r"^(?:is|are|was|were)\s+(?P<a>.+?)\s+(?P<adj>(?:more|less)\s+[a-z]+|[a-z]+er)\s+than\s+"
        r"(?P<b>.+)$",
        re.IGNORECASE,
    ),
    re.compile(
        r"^(?:which|who)\s+(?:one\s+)?(?:is|are|was|were)\s+(?P<adj>(?:more|less)\s+[a-z]+|"
        r"[a-z]+er)\s*,?\s+(?P<a>.+?)\s+or\s+(?P<b>.+)$",
        re.IGNORECASE,
    ),
)
EN_IRREGULAR_COMPARATIVES = {
    "better": "good", "worse": "bad", "larger": "large", "safer": "safe", "wider": "wide",
    "later": "late", "simpler": "simple", "nicer": "nice", "closer": "close", "finer": "fine",
    "cuter": "cute", "rarer": "rare", "purer": "pure", "looser": "loose", "denser": "dense",
}  # fmt: skip
#: Words after which the rest of the first part is the first item ("what is the cost of|Basic").
EN_PREFIX_ENDERS = words(
    "what which who how is are was were do does did of for about between compare contrast "
    "in on with from describe explain can could should would will has have include includes"
)
#: Words where the shared tail of the last part starts ("Premium| cost?").
EN_SUFFIX_STARTERS = words(
    "is are was were do does did has have handle handles in on for of at to with when "
    "during differ compare cost costs can could should would will"
)
EN_DETERMINERS = words("the a an this that these those its their our my your his her")
EN_COMPARISON_FRAMES = (
    re.compile(r"^(?:what\s+(?:is|are)\s+)?the\s+differences?\s+between\s+(?P<body>.+)$", re.I),
    re.compile(r"^how\s+(?:does|do|is|are)\s+(?P<body>.+?)\s+differs?\s+from\s+(?P<b>.+)$", re.I),
    re.compile(r"^(?:please\s+)?(?:compare|contrast)\s+(?P<body>.+)$", re.I),
    re.compile(r"^(?P<body>.+?\s(?:vs\.?|versus)\s.+)$", re.I),
)  # fmt: skip
#: The compared items: "A and B", "A, B or C", "A with / to / against B".
EN_COMPARED = re.compile(
    r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|vs\.?|versus|with|to|against)\s+", re.IGNORECASE
)
EN_ATTRIBUTE = re.compile(
    r"^(?P<items>.+?)\s+(?:in\s+terms\s+of|regarding|on|in|(?P<use>for))\s+(?P<attr>.+)$"
)
EN_PRONOUN = re.compile(r"\b(?:it|its|they|their|them)\b", re.IGNORECASE)
EN_SUBJECT = re.compile(
    r"^(?:what|who|which|how|when|where|why)\s+(?:is|are|was|were)\s+(?P<subject>.+)$"
    r"|^(?:what|who|which|how|when|where|why)\s+(?:does|do|did)\s+(?P<doer>.+)\s+\S+$",
    re.IGNORECASE,
)
_ENDERS = "？?。.!！"


def split_asks(text: str) -> list[str]:
    """Separate questions: split after each ？ / ? / ； / ; that has more text after it."""
    parts = [part.strip() for part in re.split(r"(?<=[？?；;])", text)]
    asks = [part.rstrip("；;").strip() for part in parts if len(part.strip("？?；; ")) >= 2]
    return asks if len(asks) >= 2 else [text]


def split_clauses_zh(text: str) -> list[str]:
    """ "X是什么，它如何…？" / "X做什么以及Y如何…？": two asks, each ending with the question's
    mark. [] unless every clause is an ask (has an interrogative)."""
    ender = text[-1] if text[-1:] in ZH_ENDERS else ""
    body = text.rstrip(ZH_ENDERS)
    clauses = [clause.strip() for clause in ZH_CLAUSE_JOINTS.split(body) if clause.strip()]
    if len(clauses) < 2 or not all(_is_ask_zh(clause) for clause in clauses):
        return []
    return [clause + (ender or "？") for clause in clauses]


def _is_ask_zh(clause: str) -> bool:
    return any(word in clause for word in ZH_INTERROGATIVES)


def split_clauses_en(text: str) -> list[str]:
    """ "What does A do and how does B …?" → ["What does A do?", "How does B …?"]: split
    where a conjunction (or a comma) is followed by a question word or an auxiliary."""
    body = text.rstrip(_ENDERS).strip()
    clauses = [clause.strip(" ,") for clause in EN_CLAUSE_JOINT.split(body)]
    clauses = [clause for clause in clauses if clause]
    if len(clauses) < 2 or not re.match(EN_ASK_START, clauses[0], re.IGNORECASE):
        return []
    return [clause[0].upper() + clause[1:] + "?" for clause in clauses]


def complete_subjects(asks: list[str], *, chinese: bool) -> list[str]:
    """Give later asks the first ask's subject when they lean on a pronoun, omit it, or
    only name another item ("…，专业版呢？")."""
    if chinese:
        return _complete_subjects_zh(asks)
    subject = _subject_en(asks[0])
    if not subject:
        return asks
    completed = [asks[0]]
    for ask in asks[1:]:
        ask = EN_PRONOUN.sub(lambda match: _pronoun_for(match.group(), subject), ask)
        completed.append(ask)
    return completed


def _complete_subjects_zh(asks: list[str]) -> list[str]:
    owner = _subject_zh(asks[0])
    subject = owner or _leading_subject_zh(asks[0])
    completed = [asks[0]]
    for ask in asks[1:]:
        elliptic = re.fullmatch(r"(?P<item>[^，。？?]{1,12})呢[？?]?", ask)
        pronoun = ZH_PRONOUN.match(ask)
        if elliptic:
            ask = _substitute_item_zh(asks[0], elliptic["item"], subject)
        elif subject and pronoun:
            ask = subject + ("的" if pronoun["of"] else "") + ask[pronoun.end() :]
        elif owner and owner not in ask and "的" not in ask:
            ask = f"{owner}的{ask}"
        elif subject and not owner and subject not in ask and _starts_with_predicate_zh(ask):
            ask = subject + ask
        completed.append(ask)
    return completed


def _substitute_item_zh(first: str, item: str, subject: str) -> str:
    """ "标准版套餐支持…" with "专业版" → "专业版套餐支持…": replace the word of the first ask that
    has the item's length and last character, else the first ask's subject."""
    for start in range(len(first) - len(item) + 1):
        word = first[start : start + len(item)]
        if word != item and word[-1] == item[-1]:
            return first[:start] + item + first[start + len(item) :]
    if subject and first.startswith(subject):
        return item + first[len(subject) :]
    return first


def _starts_with_predicate_zh(ask: str) -> bool:
    first = next(iter(jieba.posseg.lcut(ask)), None)
    return first is not None and (first.flag.startswith("v") or first.word in ZH_INTERROGATIVES)


def _leading_subject_zh(ask: str) -> str:
    """The words before the first verb ("丹瑾是什么定位" → "丹瑾"), or ""."""
    subject = ""
    for pair in jieba.posseg.lcut(ask):
        if pair.flag.startswith("v") or pair.word in ZH_INTERROGATIVES:
            break
        subject += pair.word
    subject = ZH_LEAD.sub("", subject).strip()
    return subject if 0 < len(subject) <= 12 and subject != ask else ""


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
    if match.group("doer") and subject.split()[0].lower() in ("i", "you", "we", "they"):
        return ""  # "How do I bake bread": the doer is the asker, not what "it" refers to
    return subject if 0 < len(subject.split()) <= MAX_ITEM_WORDS_EN else ""


# --- Chinese enumerations ---------------------------------------------------------------------


def split_items_zh(text: str, *, comparison: bool) -> list[str]:
    """ "比较A和B的X" → ["A的X", "B的X"]; "A、B和C分别是什么？" → ["A是什么？", …];
    "茶的历史和文化" → ["茶的历史", "茶的文化"]. [] when there is nothing to split."""
    core = ZH_COMPARISON_TAIL.sub("", text) if comparison else text
    core = ZH_LEAD.sub("", core)
    for word in ZH_DISTRIBUTION:
        core = core.replace(word, "")
    tokens = jieba.lcut(core)
    parts = _split_tokens(tokens)
    if len(parts) < 2 or any(not "".join(part).strip() for part in parts):
        return []
    if any(ZH_PRONOUN.match("".join(part).strip()) for part in parts[1:]):
        # "茶的历史以及它的冲泡方法": later parts are asks about the first part's subject.
        return complete_subjects(["".join(part).strip() for part in parts], chinese=True)
    if "的" in tokens:
        owned = _split_owners_zh(tokens, comparison=comparison)
        if owned is not None:
            return owned
    return _split_shared_frame_zh(parts, comparison=comparison)


def _split_tokens(tokens: list[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token in ZH_CONJUNCTIONS:
            parts.append([])
        elif token.strip():
            parts[-1].append(token)
    return parts


def _split_owners_zh(tokens: list[str], *, comparison: bool) -> list[str] | None:
    """Split at the first 的: "A和B的X和Y" → owners A, B with the tail "的X和Y" shared;
    "A的X和Y…" → attributes X, Y of A. None when the parts are not that simple."""
    cut = tokens.index("的")
    owners, tail = _split_tokens(tokens[:cut]), tokens[cut:]
    if len(owners) >= 2:
        if any(not part for part in owners):
            return None
        items = _share_head_noun(owners)
        if any(len(item) > MAX_ITEM_CHARS_ZH for item in items):
            return None
        return [item + "".join(tail) for item in items]
    attributes = _split_tokens(tokens[cut + 1 :])
    if len(attributes) < 2 or any(not part or "的" in part for part in attributes):
        return None
    owner = "".join(tokens[: cut + 1])
    last = attributes[-1]
    end = next((i for i, t in enumerate(last) if t in ZH_SUFFIX_STARTERS and i > 0), len(last))
    suffix = "".join(last[end:])
    items = ["".join(part) for part in attributes[:-1]] + ["".join(last[:end])]
    return [f"{owner}{item}{suffix}" for item in items]


def _share_head_noun(owners: list[list[str]]) -> list[str]:
    """ "标准版和专业版云存储套餐": the last owner's head noun (云存储套餐) belongs to every
    owner that is one word of the same shape as the last owner's first word (same length,
    same last character: 标准版 / 专业版), not to "丹瑾与卡卡罗" (卡卡 | 罗)."""
    last = owners[-1]
    head = "".join(last[1:])
    items = []
    for part in owners[:-1]:
        item = "".join(part)
        if len(part) == 1 and len(head) >= 2 and _same_shape(part[0], last[0]):
            item += head
        items.append(item)
    return [*items, "".join(last)]


def _same_shape(word: str, other: str) -> bool:
    return len(word) == len(other) and word[-1] == other[-1]


def _split_shared_frame_zh(parts: list[list[str]], *, comparison: bool) -> list[str]:
    first, last = parts[0], parts[-1]
    cut = next((i for i, t in enumerate(last) if t in ZH_SUFFIX_STARTERS and i > 0), len(last))
    suffix = "".join(last[cut:])
    last_item = last[:cut]
    lead_end = max((i + 1 for i, t in enumerate(first[:-1]) if t in ZH_PREFIX_ENDERS), default=0)
    start = len(first)
    # The first item is read backwards from the conjunction: as many words as the last
    # item has, stopping at a word that frames the question ("需要多少|水").
    while start > lead_end and len(first) - start < len(last_item):
        if first[start - 1] in ZH_ITEM_BOUNDARIES and start < len(first):
            break
        start -= 1
    if start > lead_end and not suffix:
        start = lead_end
    prefix = "".join(first[:start])
    items = [
        "".join(first[start:]).strip(),
        *("".join(part).strip() for part in parts[1:-1]),
        "".join(last_item).strip(),
    ]
    if any(not item or len(item) > MAX_ITEM_CHARS_ZH for item in items):
        return []
    if not suffix and comparison:
        suffix = "的特点是什么？"
    return [f"{prefix}{item}{suffix}" for item in items]


# --- English enumerations ---------------------------------------------------------------------


def split_predicates_en(text: str) -> list[str]:
    """ "How do I install and configure X?" → ["How do I install X?", "How do I configure X?"]."""
    match = EN_PREDICATES.match(text.rstrip(_ENDERS).strip())
    if not match:
        return []
    lead, rest = match["lead"], match["rest"]
    return [f"{lead} {match['v1']} {rest}?", f"{lead} {match['v2']} {rest}?"]


def comparative_items_en(text: str) -> list[str]:
    """ "Is A faster than B?" / "Which is cheaper, A or B?" → ["How fast is A?", "How fast is
    B?"]."""
    body = text.rstrip(_ENDERS).strip()
    for frame in EN_COMPARATIVE_FRAMES:
        match = frame.match(body)
        if match:
            items = [match["a"].strip(" ,"), match["b"].strip(" ,")]
            if any(not item or len(item.split()) > MAX_ITEM_WORDS_EN for item in items):
                return []
            adjective = _positive(match["adj"])
            return [f"How {adjective} is {item}?" for item in items]
    return []


def _positive(comparative: str) -> str:
    """ "faster" → "fast", "bigger" → "big", "heavier" → "heavy", "more useful" → "useful"."""
    word = comparative.lower().split()[-1]
    if " " in comparative.strip():
        return word
    if word in EN_IRREGULAR_COMPARATIVES:
        return EN_IRREGULAR_COMPARATIVES[word]
    stem = word[:-2]
    if stem.endswith("i"):
        return stem[:-1] + "y"
    if len(stem) >= 3 and stem[-1] == stem[-2] and stem[-1] not in "aeiouls":
        return stem[:-1]
    return stem


def split_items_en(text: str, *, comparison: bool) -> list[str]:
    """ "What is the difference between A and B?" → ["What is A?", "What is B?"];
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
    cut = next(
        (i for i, w in enumerate(last_words) if w.lower() in EN_SUFFIX_STARTERS and i > 0),
        len(last_words),
    )
    suffix = " ".join(last_words[cut:])
    last_item = last_words[:cut]
    start = _first_item_start(first_words, _content_count(last_item))
    prefix = " ".join(first_words[:start])
    first_item = first_words[start:]
    items = [" ".join(first_item), *parts[1:-1], " ".join(last_item)]
    if any(not item or len(item.split()) > MAX_ITEM_WORDS_EN for item in items):
        return []
    if not suffix and len(last_item) >= 2 and last_item[0].lower() not in EN_DETERMINERS:
        # "small and medium businesses", "the sales and marketing team": the items modify
        # one head noun that ends the question; one noun phrase, one question.
        return []
    determiner = first_item[0] if first_item[0].lower() == "the" else ""
    items = [items[0]] + [_with_determiner(item, determiner) for item in items[1:]]
    ender = "?"
    return [" ".join(filter(None, (prefix, item, suffix))) + ender for item in items]


def _content_count(item: list[str]) -> int:
    return sum(1 for word in item if word.lower() not in EN_DETERMINERS) or 1


def _first_item_start(first_words: list[str], wanted: int) -> int:
    """Where the first item starts, read backwards from the conjunction: as many content
    words as the last item has, stopping at a word that frames the question, then a
    determiner just before it."""
    start, content = len(first_words), 0
    while start > 1 and content < wanted:
        word = first_words[start - 1].lower()
        if word in EN_PREFIX_ENDERS:
            break
        start -= 1
        content += word not in EN_DETERMINERS
    if start > 1 and first_words[start - 1].lower() in EN_DETERMINERS:
        start -= 1
    return start


def _with_determiner(item: str, determiner: str) -> str:
    first = item.split()[0].lower()
    if not determiner or first in EN_DETERMINERS or item[:1].isupper():
        return item
    return f"{determiner} {item}"


def _comparison_items_en(body: str) -> list[str]:
    attribute = EN_ATTRIBUTE.match(body)
    items_text, attr = (attribute["items"], attribute["attr"]) if attribute else (body, "")
    items = [part.strip() for part in EN_COMPARED.split(items_text) if part.strip()]
    if len(items) < 2 or any(len(item.split()) > MAX_ITEM_WORDS_EN for item in items):
        return []
    if attr and attribute and attribute["use"]:
        return [f"What is {item} like for {attr}?" for item in items]
    if attr:
        verb = "are" if attr.endswith("s") and not attr.endswith("ss") else "is"
        return [f"What {verb} the {_without_article(attr)} of {item}?" for item in items]
    return [f"What is {item}?" for item in items]


def _without_article(phrase: str) -> str:
    return re.sub(r"^(?:the|a|an)\s+", "", phrase, flags=re.IGNORECASE)
