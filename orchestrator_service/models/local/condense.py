"""`condense_question` (LOCAL_MODEL.md §5): a follow-up rewritten to stand alone, by rules.

The history is folded turn by turn (each earlier question made standalone against the one
before), so the last one names what the conversation is about. Then, in the follow-up's
language:

- a pronoun or demonstrative ("it", "its", "they", "this plan", "它", "这个角色", "那家") with
  no antecedent in the follow-up itself is replaced by the previous question's topic, its
  entity (a named or determined noun phrase in English, the phrase before 的 or the leading
  noun phrase in Chinese);
- an ellipsis ("And the Basic one?", "What about in winter?", "那标准版呢？", "冬天呢？")
  repeats the previous question with the new part: a condition (in winter, 冬天) is added to
  it or replaces the one of the same kind; a name replaces the matching name ("Premium" →
  "Basic", 专业版 → 标准版) or else the entity;
- a changed attribute of the same entity ("And its price?", "What about its weight?",
  "那它的价格呢？", "技能呢？") asks for that attribute of the entity ("What is the price of
  …?", "…的价格是多少？"), or of a name given with it ("那标准版的价格呢？");
- "the other" ("What about the other one?", "the other plan's …", "另一个呢？", "另外那个套餐")
  is the other of two things the conversation named (earlier questions, or an answer naming a
  sibling of the entity: same head noun, or the same shape in Chinese);
- anything else is a new topic and is returned unchanged.

A previous question that names no entity ("Which plan …?") lends a pronoun the entity its
answer's first sentence opens with, else the last one an earlier question named; a follow-up
with nothing to refer to stays unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator_service.conversation import Turn
from orchestrator_service.models.local.text import EN_STOP_WORDS, segment, words
from shared.lang import CJK_CHAR, is_chinese

# ---- English ---------------------------------------------------------------------------------
_TOKEN = re.compile(r"[A-Za-z0-9](?:[\w\-]|\.(?=\w))*(?:'s)?|[^\w\s]")
_DETERMINERS = frozenset({"the", "a", "an"})
_WH = frozenset({"what", "how", "which", "who", "when", "where", "why", "whom", "whose"})
_BE = frozenset({"is", "are", "was", "were"})
_DO_MODAL = frozenset(
    {"do", "does", "did", "can", "could", "should", "would", "will", "must", "may", "might"}
)
#: Nouns a demonstrative may come with ("this plan") when the entity does not hold them.
EN_CATEGORY_NOUNS = words(
    "one ones plan plans role roles character class tier option package service product policy "
    "planet plant plants tea function method rule team"
)
_EN_PRONOUNS = {
    "it": "", "they": "", "them": "", "him": "", "its": "'s", "their": "'s", "his": "'s",
    "her": "'s",
}  # fmt: skip
_EN_ELLIPSIS = re.compile(
    r"^(?:(?:and|but|so)\s+)?(?:(?:what|how)\s+about|what\s+of|same\s+for)\s+(?P<x>.+)$"
    r"|^and\s+(?P<y>.+)$"
    r"|^(?P<z>(?:its|their|his|her)\s+.+)$",
    re.IGNORECASE,
)
_EN_POSSESSIVES = frozenset({"its", "their", "his", "her"})
#: "the other (one|plan|…)('s)": the other of two things the conversation named.
_EN_OTHER = re.compile(r"\bthe\s+other\b(?:\s+(?P<noun>[a-z]+?)(?P<pos>'s)?\b)?", re.IGNORECASE)
_PREPOSITIONS = words("in on at during for with without after before under over when if while from")
_ENDING = "?？.!！。 "
_CLAUSE_BREAKS = frozenset({",", ";", "and", "but"})
_CITATION = re.compile(r"\[\d+\]")

# ---- Chinese ---------------------------------------------------------------------------------
#: Where a Chinese question's leading noun phrase (its entity) ends.
ZH_ENTITY_ENDS = (
    "的", "每", "多少", "多久", "多大", "几", "是", "有", "包含", "支持", "需要", "能", "会",
    "可以", "适合", "要", "应该", "应当", "怎么", "如何", "什么", "哪", "提供", "保留", "用",
    "在", "吗", "呢", "为", "对", "被", "最", "一般", "通常", "属于", "，", ",", "？", "?", "。",
)  # fmt: skip
_ZH_CATEGORY = "角色|人物|套餐|方案|版本|计划|政策|产品|服务|公司|茶|植物|行星|东西|规定"
#: A demonstrative with the noun it may carry: 这个(角色), 那家, 该(套餐); a bare 这 / 那
#: only with a noun (这套餐), since alone they open many sentences (那么, 这样).
_ZH_DEMONSTRATIVE = re.compile(
    rf"(?:这个|那个|这款|那款|这家|那家|这种|那种|这位|那位|(?<!应)该|(?<![因如])此)(?:{_ZH_CATEGORY})?"
    rf"|[这那](?:{_ZH_CATEGORY})"
)
_ZH_PRONOUN = re.compile(r"它们|他们|她们|它|(?<!其)他|她")
_ZH_LEAD = re.compile(r"^(?:那么|那(?![个家款种位些])|还有|而|再问一下|请问)")
_ZH_CONDITION_WORDS = (
    "春天", "夏天", "秋天", "冬天", "春季", "夏季", "秋季", "冬季", "早上", "上午", "中午",
    "下午", "晚上", "夜里", "白天", "睡前", "周末", "工作日", "节假日", "假期",
)  # fmt: skip
_ZH_QUESTION_WORDS = ("什么", "多少", "多久", "怎么", "如何", "哪", "吗", "几", "是否", "谁")
#: "the other" (另一个, 另外那个套餐, 另一种): the other of two things the conversation named.
_ZH_OTHER = re.compile(rf"另外?[一那]?[个种款家位套](?P<noun>{_ZH_CATEGORY})?")
#: Attributes a bare "X呢" asks about (技能呢？ after 赤羽的属性是什么？), matched at the end of X;
#: after a pronoun (它的价格呢) any X is an attribute.
_ZH_ATTRIBUTES = (
    "价格", "价钱", "售价", "费用", "月费", "年费", "武器", "技能", "属性", "定位", "职业",
    "颜色", "重量", "尺寸", "大小", "容量", "空间", "保修期", "寿命", "续航", "速度", "温度",
    "水温", "功能", "特点", "优点", "缺点", "作用", "用途", "产地", "品种", "时间", "时长",
)  # fmt: skip
#: Attributes asked with 是多少 (a quantity); any other with 是什么.
_ZH_QUANTITIES = (
    "价格", "价钱", "价", "费用", "费", "钱", "温", "温度", "容量", "空间", "重量", "时间",
    "时长", "数量", "人数", "大小", "尺寸", "速度",
)  # fmt: skip
_ZH_NAMED_ATTRIBUTE = re.compile(r"(?P<name>[^的呢，,]{2,10})的(?P<attr>[^的呢]{1,8})呢")
_ZH_ATTRIBUTE_ELLIPSIS = re.compile(
    rf"(?:(?P<who>{_ZH_PRONOUN.pattern}|{_ZH_DEMONSTRATIVE.pattern})的?)?(?P<attr>[^的呢]{{1,8}})呢"
)


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    text: str


def condense(question: str, history: Sequence[Turn]) -> str:
    """`question` made standalone against `history` (oldest first), or `question` itself."""
    previous: str | None = None
    answer = ""
    named: list[str] = []
    for turn in history:
        if turn.question.strip():
            previous = (
                turn.question
                if previous is None
                else follow_up(turn.question, previous, answer, named)
            )
            answer = turn.answer
            named = _named(previous, answer, named)
    if previous is None:
        return question
    return follow_up(question, previous, answer, named)


def follow_up(question: str, previous: str, answer: str = "", named: Sequence[str] = ()) -> str:
    """`question` read right after the standalone `previous` question and its `answer`: a
    pronoun refers to the question's entity or, when it names none ("Which plan …?"), to the
    entity the answer's first sentence opens with, else to the last of `named` (the entities
    the conversation named before, oldest first; "the other" is one of them too)."""
    text = question.strip()
    if not text:
        return question
    opening = _CITATION.sub("", re.split(r"(?<=[。！？.!?])\s*", answer.strip(), maxsplit=1)[0])
    if is_chinese(text):
        subject = zh_entity(previous) or zh_entity(opening) or (named[-1] if named else None)
        return _zh_follow_up(text, previous, subject, named) or question
    subject = en_entity(previous) or en_entity(opening) or (named[-1] if named else None)
    return _en_follow_up(text, previous, subject, named) or question


def _named(question: str, answer: str, named: Sequence[str]) -> list[str]:
    """`named` with what the standalone `question` and its `answer` name, its entity last: the
    entities of the question, and the answer's names of the entity's kind ("No, the Premium
    support plan does" after "Does the Basic support plan …?")."""
    chinese = is_chinese(question)
    entity = zh_entity(question) if chinese else en_entity(question)
    if entity is None:
        return list(named)
    text = _CITATION.sub("", answer)
    found = _zh_siblings(entity, text) if chinese else _en_siblings(entity, text)
    if not chinese:
        found += _en_spans(question)[0]
    found.append(entity)
    kept = [n for n in named if n.lower() not in {f.lower() for f in found}]
    return kept + list(dict.fromkeys(found))


def _other(subject: str, named: Sequence[str], noun: str | None) -> str | None:
    """The most recently named entity other than `subject`, one holding `noun` ("the other
    plan", 另外那个套餐) first."""
    others = [n for n in reversed(named) if n.lower() != subject.lower()]
    if noun:
        fitting = [n for n in others if noun.lower() in n.lower()]
        others = fitting or others
    return others[0] if others else None


# ---- English ---------------------------------------------------------------------------------


def _en_follow_up(
    text: str, previous: str, subject: str | None, named: Sequence[str]
) -> str | None:
    ellipsis = _EN_ELLIPSIS.match(text.rstrip(_ENDING))
    if ellipsis:
        part = (ellipsis.group("x") or ellipsis.group("y") or ellipsis.group("z") or "").strip()
        words = [w.lower() for w in _words(part)]
        if part and len(words) <= 6 and not (set(words) & (_WH | _BE | _DO_MODAL)):
            return _en_ellipsis(part, previous, subject, named)
    other = _EN_OTHER.search(text)
    if other is not None and subject is not None:
        noun = (other.group("noun") or "").lower()
        if noun in EN_CATEGORY_NOUNS or noun in subject.lower().split():
            found = _other(subject, named, noun if noun not in {"one", "ones"} else None)
            if found is None:
                return None
            text = text[: other.start()] + found + (other.group("pos") or "") + text[other.end() :]
            return _en_pronouns(text, subject) or _en_join(_TOKEN.findall(text))
    return _en_pronouns(text, subject)


def _words(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text) if t[0].isalnum()]


def _is_name(token: str, index: int) -> bool:
    """A capitalised word after the first (not "I"), or a code-like name (asyncio.gather)."""
    if re.search(r"\w[._]\w", token):
        return True
    return index > 0 and token[0].isupper() and token != "I"


def en_entity(question: str) -> str | None:
    """The entity an English question is about: its first noun phrase holding a name, else
    its subject (after the auxiliary), else its first determined noun phrase."""
    named, subject, determined = _en_spans(question)
    if named:
        return named[0]
    if subject is not None:
        return subject
    return determined[0] if determined else None


def _en_siblings(entity: str, text: str) -> list[str]:
    """The noun phrases of `text` holding a name and ending in `entity`'s head noun ("the
    Premium support plan" for "the Basic support plan"), other than `entity`."""
    head = entity.split()[-1].lower()
    return [
        span
        for span in _en_spans(text)[0]
        if span.split()[-1].lower() == head and span.lower() != entity.lower()
    ]


def _en_spans(question: str) -> tuple[list[str], str | None, list[str]]:
    """An English question's noun phrases holding a name, its subject (after the auxiliary),
    and its determined noun phrases."""
    tokens = _TOKEN.findall(question.strip())
    lowered = [t.lower() for t in tokens]
    aux = next((i for i, t in enumerate(lowered[:7]) if i > 0 and t in _BE | _DO_MODAL), None)
    if aux == 1 and lowered[0] == "who":
        aux = None  # "Who may work remotely?": the question word is the subject
    after_do = aux is not None and lowered[aux] in _DO_MODAL

    def phrase(start: int, *, subject: bool = False) -> _Span | None:
        end = start
        while end < len(tokens):
            token, low = tokens[end], lowered[end]
            if not token[0].isalnum() or (end > start and (low in EN_STOP_WORDS)):
                break
            if low.endswith("ly") and end > start:
                break
            end += 1
            if token.endswith("'s") or (end - start > 1 and low in EN_CATEGORY_NOUNS):
                break  # "the Basic support plan [includes …]"
        if end == start:
            return None
        if after_do and end >= len(tokens) - 1:
            end -= 1  # "does the plan [cost]?": the main verb is not part of the subject
        if (
            subject
            and after_do
            and lowered[start] not in _DETERMINERS
            and not any(_is_name(tokens[i], i) for i in range(start, end))
        ):
            end = min(end, start + 1)  # "can [employees] work remotely"
        found = tokens[start:end]
        if not found or all(w.lower() in _DETERMINERS for w in found):
            return None
        found[-1] = found[-1].removesuffix("'s")
        if found[0].lower() in _DETERMINERS:
            found[0] = found[0].lower()
        return _Span(start, end, " ".join(found))

    named: list[_Span] = []
    determined: list[_Span] = []
    i = 0
    while i < len(tokens):
        if lowered[i] in _DETERMINERS or (tokens[i][0].isalnum() and _is_name(tokens[i], i)):
            span = phrase(i)
            if span is not None:
                if any(_is_name(tokens[j], j) for j in range(span.start, span.end)):
                    named.append(span)
                else:
                    determined.append(span)
                i = max(span.end, i + 1)
                continue
        i += 1
    subject: str | None = None
    if aux is not None and aux + 1 < len(tokens):
        span = phrase(aux + 1, subject=True)
        if span is not None and lowered[aux + 1] not in EN_STOP_WORDS - _DETERMINERS:
            subject = span.text
    return [s.text for s in named], subject, [s.text for s in determined]


def _en_pronouns(text: str, entity: str | None) -> str | None:
    if entity is None:
        return None
    tokens = _TOKEN.findall(text)
    lowered = [t.lower() for t in tokens]
    own = en_entity(text)
    out: list[str] = []
    changed = False
    i = 0
    while i < len(tokens):
        low = lowered[i]
        # An antecedent in an earlier clause of the question itself ("What is asyncio and how
        # is it used?") keeps the pronoun.
        clause = max((j for j in range(i) if lowered[j] in _CLAUSE_BREAKS), default=-1)
        antecedent = own is not None and own.lower() in " ".join(lowered[: max(clause, 0)])
        if not antecedent and low in _EN_PRONOUNS:
            out.append(entity + _EN_PRONOUNS[low])
            changed = True
            i += 1
            continue
        if not antecedent and low in {"this", "that", "these", "those"} and i + 1 < len(tokens):
            noun = lowered[i + 1]
            if noun in EN_CATEGORY_NOUNS or noun.removesuffix("'s") in entity.lower().split():
                out.append(entity + ("'s" if noun.endswith("'s") else ""))
                changed = True
                i += 2
                continue
        out.append(tokens[i])
        i += 1
    return _en_join(out) if changed else None


def _en_join(tokens: list[str]) -> str:
    text = ""
    for token in tokens:
        if text and (token[0].isalnum() or token[0] in "(\"'"):
            text += " "
        text += token
    text = re.sub(r"^(?:and|so|also|but),?\s+", "", text, flags=re.IGNORECASE)
    return text[:1].upper() + text[1:]


def _en_ellipsis(part: str, previous: str, subject: str | None, named: Sequence[str]) -> str | None:
    body = previous.strip().rstrip(_ENDING)
    mark = "?"
    words = _words(part)
    if words and words[0].lower() in _PREPOSITIONS:
        # A condition: it replaces one with the same preposition, else it is added.
        same = re.search(rf"\b{re.escape(words[0])}\s+[^,;?]+$", body, re.IGNORECASE)
        if same:
            return f"{body[: same.start()]}{part}{mark}"
        return f"{body} {part}{mark}"
    if subject is None:
        return None
    lowered = [w.lower() for w in words]
    other = _EN_OTHER.search(part)
    if other is not None:
        noun = (other.group("noun") or "").lower()
        found = _other(subject, named, noun if noun not in {"", "one", "ones"} else None)
        before, after = part[: other.start()].strip(), part[other.end() :].strip()
        if found is None:
            return None
        if not before and not after:  # "What about the other one?"
            return body.replace(subject, found, 1) + mark if subject in body else None
        if not before and other.group("pos"):  # "And the other plan's price?"
            return _en_attribute(after, found)
        of = re.fullmatch(r"the\s+(.+?)\s+of", before, re.IGNORECASE)
        return _en_attribute(of.group(1), found) if of and not after else None
    unnamed = not any(_is_name(w, i + 2) for i, w in enumerate(words[1:]))
    subject_named = any(_is_name(w, i + 1) for i, w in enumerate(subject.split()))
    if (
        len(words) > 1
        and unnamed
        and (
            lowered[0] in _EN_POSSESSIVES
            or (
                lowered[0] == "the"
                and subject_named
                # "And the basic plan?": another thing of the entity's kind, not an attribute
                and lowered[-1] not in {"one", "ones", subject.split()[-1].lower()}
            )
        )
    ):
        # The entity's attribute: "And its price?" → "What is the price of …?"
        return _en_attribute(part.split(None, 1)[1], subject)
    owner = re.fullmatch(r"(?P<who>.+?)'s\s+(?P<attribute>[^']+)", part)
    subject_names = [w for i, w in enumerate(subject.split()) if _is_name(w, i + 1)]
    if owner is not None and subject_names:
        # Another name's attribute: "What about the Basic plan's price?"
        names = [w for i, w in enumerate(_words(owner.group("who"))) if _is_name(w, i + 1)]
        if names:
            renamed = subject.replace(" ".join(subject_names), " ".join(names), 1)
            return _en_attribute(owner.group("attribute"), renamed)
    entity = en_entity(previous)
    if entity is None:
        return None
    names = [w for i, w in enumerate(_TOKEN.findall(part)) if _is_name(w, i + 1)]
    entity_names = [w for i, w in enumerate(entity.split()) if _is_name(w, i + 1)]
    if names and entity_names:
        old = " ".join(entity_names)
        new_entity = entity.replace(old, " ".join(names), 1)
    else:
        new_entity = part
    if entity not in body:
        return None
    return body.replace(entity, new_entity, 1) + mark


def _en_attribute(attribute: str, subject: str) -> str:
    """The question for `subject`'s `attribute`: "What is the price of …?"."""
    attribute = attribute.strip().rstrip(_ENDING)
    last = attribute.split()[-1].lower()
    plural = last.endswith("s") and not last.endswith(("ss", "us", "is", "'s"))
    return f"What {'are' if plural else 'is'} the {attribute} of {subject}?"


# ---- Chinese ---------------------------------------------------------------------------------


def zh_entity(question: str) -> str | None:
    """The entity a Chinese question is about: its leading noun phrase, up to 的 or the first
    word that starts the predicate (每, 多少, 是, 支持, …); None when shorter than 2."""
    text = _ZH_LEAD.sub("", question.strip())
    for word in _ZH_CONDITION_WORDS:
        text = text.removeprefix(word)
    cut = len(text)
    for marker in ZH_ENTITY_ENDS:
        at = text.find(marker, 1)
        if at != -1:
            cut = min(cut, at)
    entity = text[:cut].strip()
    if (
        len(entity) < 2
        or _ZH_DEMONSTRATIVE.match(entity)
        or _ZH_PRONOUN.search(entity)
        or any(word in entity for word in _ZH_QUESTION_WORDS)
    ):
        return None
    return entity


def _zh_siblings(entity: str, text: str) -> list[str]:
    """The phrases of `text` of `entity`'s shape — as long, ending in the same two characters
    (专业版云存储套餐 for 标准版云存储套餐) — other than `entity`."""
    if len(entity) < 3:
        return []
    found = []
    for i in range(len(text) - len(entity) + 1):
        span = text[i : i + len(entity)]
        if span != entity and span.endswith(entity[-2:]) and all(CJK_CHAR.match(c) for c in span):
            found.append(span)
    return found


def _zh_rename(subject: str, name: str) -> str:
    """`subject` named `name`: its span of `name`'s shape replaced (标准版 in 专业版云存储套餐),
    else `name` itself."""
    for i in range(len(subject) - len(name) + 1):
        span = subject[i : i + len(name)]
        if len(name) >= 2 and span[-1] == name[-1] and all(CJK_CHAR.match(c) for c in span):
            return subject[:i] + name + subject[i + len(name) :]
    return name


def _zh_attribute(subject: str, attribute: str) -> str:
    """The question for `subject`'s `attribute`: 多少 for a quantity, else 什么."""
    asked = "是多少" if attribute.endswith(_ZH_QUANTITIES) else "是什么"
    return f"{subject}的{attribute}{asked}？"


def _zh_follow_up(
    text: str, previous: str, subject: str | None, named: Sequence[str]
) -> str | None:
    body = _ZH_LEAD.sub("", text)
    bare = body.rstrip(_ENDING)
    other = _ZH_OTHER.search(bare)
    if other is not None and subject is not None:
        found = _other(subject, named, other.group("noun"))
        if found is None:
            return None
        rest = bare[other.end() :]
        if not bare[: other.start()] and rest == "呢":  # 另一个呢？
            asked = _ZH_LEAD.sub("", previous.strip())
            return asked.replace(subject, found, 1) if subject in asked else None
        if rest.startswith("的") and rest.endswith("呢") and len(rest) > 2:  # 另一个的价格呢？
            return _zh_attribute(found, rest[1:-1])
        return body[: other.start()] + found + body[other.end() :]
    attribute = _ZH_ATTRIBUTE_ELLIPSIS.fullmatch(bare)
    if (
        attribute is not None
        and subject is not None
        and (attribute.group("who") or attribute.group("attr").endswith(_ZH_ATTRIBUTES))
    ):
        return _zh_attribute(subject, attribute.group("attr"))
    named_attribute = _ZH_NAMED_ATTRIBUTE.fullmatch(bare)
    if (
        named_attribute is not None
        and subject is not None
        and named_attribute.group("attr").endswith(_ZH_ATTRIBUTES)
    ):  # 那标准版的价格呢？
        return _zh_attribute(
            _zh_rename(subject, named_attribute.group("name")), named_attribute.group("attr")
        )
    resolved = _zh_pronouns(body, subject)
    if resolved is not None:
        return resolved
    if bare.endswith("呢"):
        part = _ZH_LEAD.sub("", bare[:-1]).removesuffix("的").strip()
        if 0 < len(part) <= 10 and not any(w in part for w in _ZH_QUESTION_WORDS):
            return _zh_ellipsis(part, previous)
    return None


def _zh_pronouns(body: str, entity: str | None) -> str | None:
    found = [m for m in (_ZH_PRONOUN.search(body), _ZH_DEMONSTRATIVE.search(body)) if m]
    if not found or entity is None:
        return None
    match = min(found, key=lambda m: m.start())
    # An antecedent in the question itself ("KestrelDB是什么，它…") keeps the pronoun.
    if re.search(r"[，,；;]", body[: match.start()]):
        return None
    return body[: match.start()] + entity + body[match.end() :]


def _zh_ellipsis(part: str, previous: str) -> str | None:
    body = _ZH_LEAD.sub("", previous.strip())
    if part in _ZH_CONDITION_WORDS or part.endswith(("时", "时候", "期间", "的话")):
        for word in _ZH_CONDITION_WORDS:
            if word in body:
                return body.replace(word, part, 1)
        return part + body
    # A name of the same shape (标准版 for 专业版) replaces its counterpart …
    head = part if len(part) <= 4 else segment(part)[0]
    for i in range(len(body) - len(head) + 1):
        span = body[i : i + len(head)]
        if (
            len(head) >= 2
            and span != head
            and span[-1] == head[-1]
            and all(CJK_CHAR.match(c) for c in span)
        ):
            return body[:i] + head + body[i + len(head) :]
    # … else the new name replaces the previous question's entity.
    entity = zh_entity(body)
    if entity is None or entity not in body:
        return None
    return body.replace(entity, part, 1)
