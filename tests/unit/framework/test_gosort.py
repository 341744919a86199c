"""framework/gosort.py is Go's sort.Slice: the order it leaves equal elements in is Go's (vectors
sorted by Go 1.26's sort.Slice with less = key ascending; the outputs are the input positions)."""

from __future__ import annotations

import pytest

from policy_scheduler.framework.gosort import slice_sort

GO = [
    ("1 1 1 1 0 1 1 0 0 1 0 0 1",
     "7 11 10 8 4 6 0 5 3 9 2 1 12"),
    ("0 2 0 0 1 2 1 1 3 0 3 1 0 0 1 2 2 2 2 0 3 0 0 2 2 3 2 0 3 2 1 2 1 0 1 3 3 2 1 3",
     ("0 13 2 3 19 33 22 27 9 21 12 11 30 38 14 7 32 34 6 4 16 37 18 23 24 17 26 15 5 29 1 31 10 "
      "28 25 35 36 20 8 39")),
    (("3 3 1 4 3 4 0 4 3 0 4 4 0 4 4 4 2 2 2 1 1 0 4 2 0 3 0 0 4 4 2 4 2 3 3 1 2 2 1 4 1 3 0 1 0 "
      "4 2 3 0 1 4 1 0 0 0 1 3 4 1 0 3 3 2 3"),
     ("12 21 24 27 48 54 6 53 52 9 42 26 59 44 49 43 51 40 38 19 20 55 35 58 2 17 36 23 46 62 30 "
      "16 32 18 37 61 60 34 33 1 0 41 8 56 25 4 63 47 14 11 50 10 13 7 5 45 15 57 3 39 22 31 29 "
      "28")),
    (("3 3 1 5 4 0 0 2 4 5 5 3 1 2 2 3 4 1 3 4 4 5 0 5 3 4 0 5 3 5 4 5 0 1 4 1 1 0 0 0 4 2 4 5 2 "
      "2 3 4 5 3 4 0 5 3 5 3 5 3 4 0 3 1 3 0 0 2 5 2 0 4 1 3 2 1 0 3 2 5 1 5 0 4 4 5 3 4 4 0 5 4 "
      "5 1 5 1 0 5 0 1 5 2 2 5 5 4 5 1 4 4 5 2 3 4 2 3 1 0 1 0 0 4"),
     ("22 68 64 118 117 5 6 63 59 115 74 51 80 87 39 38 37 32 94 96 26 78 73 105 2 61 116 114 70 "
      "97 12 91 17 33 93 35 36 100 76 14 67 41 72 13 44 45 65 7 112 109 99 75 60 15 55 53 28 57 "
      "49 110 11 113 62 84 24 46 0 18 1 71 89 30 119 58 4 8 16 19 50 111 20 81 82 69 47 85 86 107"
      " 106 42 103 40 25 34 83 43 31 29 98 27 92 101 102 90 104 23 88 95 108 21 48 79 77 52 10 9 "
      "54 56 3 66")),
]


@pytest.mark.parametrize("keys, want", GO)
def test_equal_keys_end_where_gos_sort_leaves_them(keys, want):
    xs = [(int(k), i) for i, k in enumerate(keys.split())]
    slice_sort(xs, lambda a, b: a[0] < b[0])
    assert [i for _, i in xs] == [int(x) for x in want.split()]
    assert [k for k, _ in xs] == sorted(k for k, _ in xs)


def test_up_to_twelve_elements_is_an_insertion_sort_stable():
    xs = [(k % 3, i) for i, k in enumerate([5, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8])]
    slice_sort(xs, lambda a, b: a[0] < b[0])
    assert xs == sorted(xs)
