"""dltools.beyond.pipeline's timeline tools, on schedules written out by hand."""
import pytest

from dltools.beyond.pipeline import bubble_fraction, logical_timeline, max_in_flight


def gpipe(p, m):
    """GPipe's order on each stage: all forwards, then all backwards."""
    return [{"stage": s, "what": w, "microbatch": i, "start": k} for s in range(p)
            for k, (w, i) in enumerate([("forward", i) for i in range(m)]
                                       + [("backward", i) for i in range(m)])]


def one_f_one_b(p, m):
    """1F1B: p - s warm-up forwards, then alternate backward and forward, then drain."""
    events = []
    for s in range(p):
        warm = min(m, p - s)
        order = [("forward", i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            order.append(("backward", b))
            b += 1
            if f < m:
                order.append(("forward", f))
                f += 1
        events += [{"stage": s, "what": w, "microbatch": i, "start": k}
                   for k, (w, i) in enumerate(order)]
    return events


@pytest.mark.parametrize("schedule", [gpipe, one_f_one_b])
@pytest.mark.parametrize("p, m", [(2, 2), (2, 8), (4, 4), (4, 16), (3, 5)])
def test_replayed_bubble_matches_the_formula(schedule, p, m):
    replay = logical_timeline(schedule(p, m))
    assert bubble_fraction(replay) == pytest.approx((p - 1) / (m + p - 1))


def test_in_flight_separates_the_schedules():
    assert [max_in_flight(gpipe(4, 8), s) for s in range(4)] == [8] * 4
    assert [max_in_flight(one_f_one_b(4, 8), s) for s in range(4)] == [4, 3, 2, 1]


def test_a_bad_order_is_refused():
    events = gpipe(2, 2)
    events = [e for e in events if not (e["stage"] == 1 and e["what"] == "backward"
                                        and e["microbatch"] == 0)]
    with pytest.raises(ValueError, match="deadlock"):
        logical_timeline(events)


def test_one_microbatch_at_a_time_has_a_larger_bubble_than_the_formula():
    """F0 B0 F1 B1 ... on every stage (no microbatch starts before the last one came back) idles
    far more than (p - 1)/(m + p - 1): the replay measures the order, not the formula."""
    p, m = 4, 8
    serial = [{"stage": s, "what": w, "microbatch": i, "start": 2 * i + (w == "backward")}
              for s in range(p) for i in range(m) for w in ("forward", "backward")]
    bubble = bubble_fraction(logical_timeline(serial))
    assert bubble == pytest.approx(0.75) and bubble > (p - 1) / (m + p - 1) + 0.4


def test_stages_need_a_depth_divisible_by_the_world_size():
    from dltools.beyond.model import make_model
    from dltools.beyond.pipeline import stage_blocks
    with pytest.raises(ValueError, match="divisible by 4"):
        stage_blocks(make_model(8, 6), 0, 4)
    assert len(stage_blocks(make_model(8, 8), 3, 4)) == 2
