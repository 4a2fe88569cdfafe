"""A fit turns numpy's huge-page advice off while it allocates, and puts the setting back as it found it."""

import threading

import pytest

from imageforest.forest import memory_pages
from imageforest.forest.memory_pages import small_pages

advice = pytest.importorskip("numpy._core.multiarray")


def test_advice_is_off_inside_and_restored_after_nested_blocks(monkeypatch):
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    before = advice._get_madvise_hugepage()
    advice._set_madvise_hugepage(True)
    try:
        with small_pages():
            assert advice._get_madvise_hugepage() is False
            with small_pages():
                assert advice._get_madvise_hugepage() is False
            assert advice._get_madvise_hugepage() is False
        assert advice._get_madvise_hugepage() is True
        with pytest.raises(RuntimeError), small_pages():
            raise RuntimeError("a failed fit")
        assert advice._get_madvise_hugepage() is True
    finally:
        advice._set_madvise_hugepage(before)


def test_overlapping_blocks_in_two_threads_restore_the_advice_once_both_end(monkeypatch):
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    before = advice._get_madvise_hugepage()
    advice._set_madvise_hugepage(True)
    entered, release = threading.Event(), threading.Event()

    def other_fit():
        with small_pages():
            entered.set()
            release.wait(10)

    try:
        worker = threading.Thread(target=other_fit)
        with small_pages():
            worker.start()
            entered.wait(10)
        assert advice._get_madvise_hugepage() is False  # the other fit is still allocating
        release.set()
        worker.join(10)
        assert advice._get_madvise_hugepage() is True and memory_pages._depth == 0
    finally:
        release.set()
        advice._set_madvise_hugepage(before)


def test_a_users_own_setting_is_left_alone(monkeypatch):
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    before = advice._get_madvise_hugepage()
    advice._set_madvise_hugepage(True)
    try:
        with small_pages():
            assert advice._get_madvise_hugepage() is True
    finally:
        advice._set_madvise_hugepage(before)
