"""The shared English stemming that BM25 and the local grader both match words with."""

from shared.lexical import bm25_text, stem


def test_bm25_text_stems_english_words_in_place_and_leaves_chinese() -> None:
    assert (
        bm25_text("Succulents are Watered 3 times; 多肉类植物")
        == "succul are water 3 time; 多肉类植物"
    )


def test_the_grader_and_bm25_share_one_stemmer() -> None:
    assert stem("watering") == stem("watered") == bm25_text("water")
