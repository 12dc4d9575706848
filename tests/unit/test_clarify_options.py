"""Clarify only between things (LOCAL_MODEL.md §2): the options of a `clarify` are distinct
things of the kind the question refers to ("this role" → the roles), never the sections of one
document (a manual's Overview, Battery, Calibration; 充电, 防水), in English and Chinese, with a
capitalised name or without."""

from __future__ import annotations

import pytest

from orchestrator_service.models.local.grading import grade, names_one_of_kind

ROLES_EN = (
    "# Roles in Harbor Quest\n\n## Navigator\nThe Navigator is a support role. Its skill is Star "
    "Chart.\n\n## Lookout\nThe Lookout is a ranged role. Its skill is Eagle Eye."
)
ROLES_ZH = (
    "# 《星海守望者》的角色\n\n## 丹瑾\n丹瑾是治疗角色，属性为水。\n\n"
    "## 赤羽\n赤羽是近战输出角色，属性为火。"
)
PLANS = (
    "# Orion hosting plans\n\n## Orion Basic plan\nThe Orion Basic plan costs 9 dollars a month."
    "\n\n## Orion Pro plan\nThe Orion Pro plan costs 29 dollars a month."
)
PLANS_ZH = "# 套餐说明\n\n## 基础套餐\n基础套餐每月九元。\n\n## 专业套餐\n专业套餐每月二十九元。"
DRONES = (
    "# Kestrel drones\n\n## Kestrel 3\nThe Kestrel 3 drone flies for up to 45 minutes.\n\n"
    "## Kestrel 2\nThe Kestrel 2 drone flies for up to 31 minutes."
)
TEAMS = "# Teams\n\n## Team A\nTeam A meets on Mondays.\n\n## Team B\nTeam B meets on Fridays."
WIDGET = (
    "# Zephyr Widget user manual\n\n## Overview\n\nThe Zephyr Widget is a weather sensor.\n\n"
    "## Battery\n\nThe Zephyr Widget batteries last about 18 hours of continuous use.\n\n"
    "## Calibration\n\nTo calibrate the Zephyr Widget, hold the reset button for ten seconds."
)
BAND_ZH = (
    "# 云雀智能手环使用说明\n\n## 充电\n云雀智能手环充满电需要约两小时，充满后可以连续使用七天。"
    "\n\n## 防水\n云雀智能手环的防水等级为5ATM，可以佩戴游泳。\n\n"
    "## 心率监测\n手环每十分钟自动测量一次心率。"
)


@pytest.mark.parametrize(
    ("question", "text", "options"),
    [
        # things of the kind: the options
        ("What is the skill of this role?", ROLES_EN, ["Navigator", "Lookout"]),
        ("这个角色的属性是什么？", ROLES_ZH, ["丹瑾", "赤羽"]),
        ("How much does this plan cost?", PLANS, ["Orion Basic plan", "Orion Pro plan"]),
        ("这个套餐每月多少钱？", PLANS_ZH, ["基础套餐", "专业套餐"]),
        ("How long can this drone fly?", DRONES, ["Kestrel 3", "Kestrel 2"]),
        ("When does this team meet?", TEAMS, ["Team A", "Team B"]),
        # sections of one thing: no options, the answer
        ("How long do the widget batteries last?", WIDGET, []),
        ("How do I calibrate this widget?", WIDGET, []),
        ("How long do the Zephyr Widget batteries last?", WIDGET, []),
        ("这款手环的防水等级是多少？", BAND_ZH, []),
        ("这个手环充满电需要多久？", BAND_ZH, []),
    ],
)
def test_clarify_options_are_things_never_sections(
    question: str, text: str, options: list[str]
) -> None:
    verdict = grade(question, [{"text": text, "filename": "d.md", "score": 2 / 61, "rrf_rank": 1}])
    assert verdict.hitl_options == options
    assert verdict.route == ("clarify" if options else "answer")


@pytest.mark.parametrize(
    ("heading", "body", "kind", "thing"),
    [
        ("Orion Basic plan", "", "plan", True),
        ("Plan A", "", "plan", True),
        ("Plans 2", "", "plan", True),
        ("Plant", "", "plan", False),
        ("Plan a", "", "plan", False),
        ("Widget care", "Wipe the widget dry.", "widget", False),
        ("Battery", "The widget batteries last. Replace the battery pack.", "widget", False),
        ("Overview", "The Zephyr Widget is a handheld weather sensor.", "widget", False),
        ("Kestrel 3", "The Kestrel 3 drone flies for 45 minutes.", "drone", True),
        ("Navigator", "The Navigator is a support role.", "role", True),
        ("丹瑾", "丹瑾是治疗角色，属性为水。", "角色", True),
        ("基础套餐", "", "套餐", True),
        ("方案一", "", "方案", True),
        ("套餐", "", "套餐", False),
        ("充电", "云雀智能手环充满电需要约两小时。请使用原装充电线充电。", "手环", False),
        ("防水", "云雀智能手环的防水等级为5ATM。", "手环", False),
    ],
)
def test_names_one_of_kind(heading: str, body: str, kind: str, thing: bool) -> None:
    assert names_one_of_kind(heading, body, kind) is thing
