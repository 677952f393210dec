"""The interval arithmetic under profile's overlap numbers: merge, subtract, intersect, and the sweep."""

from infra_agent.tools.profile import intervals as iv


def test_merge_joins_touching_and_overlapping_intervals_and_drops_empty_ones():
    assert iv.merge([(5, 7), (0, 2), (2, 3), (6, 9), (10, 10)]) == [(0, 3), (5, 9)]


def test_subtract_and_intersect_split_around_holes():
    keep = [(0, 10), (20, 30)]
    holes = [(2, 4), (8, 22), (29, 40)]
    assert iv.subtract(keep, holes) == [(0, 2), (4, 8), (22, 29)]
    assert iv.intersect(keep, holes) == [(2, 4), (8, 10), (20, 22), (29, 30)]
    assert iv.total(iv.subtract(keep, holes)) + iv.total(iv.intersect(keep, holes)) == iv.total(
        keep
    )


def test_sweep_gives_each_sets_time_the_overlap_and_the_longest_stretch_alone():
    a = [(0, 10), (30, 40)]  # A alone 0-5, both 5-10, A alone 30-40 (10 long)
    b = [(5, 12), (14, 16), (8, 9)]
    s = iv.sweep(a, b)
    assert (s.a_ns, s.b_ns, s.both_ns) == (20, 9, 5)
    assert s.longest_a_only_ns == 10 and s.longest_b_only_ns == 2


def test_sweep_of_disjoint_sets_has_no_overlap():
    s = iv.sweep([(0, 5), (10, 15)], [(5, 10)])
    assert s.both_ns == 0 and s.a_ns == 10 and s.b_ns == 5 and s.longest_a_only_ns == 5
