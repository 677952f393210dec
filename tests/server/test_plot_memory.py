"""What a long session keeps of its plots (issue 36, item 6): matplotlib loads its FreeType fonts
once per drawing thread and caches them (about 0.8 MB of native memory each), so plots drawn on
whichever worker thread is free made the server's RSS rise with every plotting call. Every plot
is drawn on the one plot thread (tools/common/plot_thread.py): the fonts are loaded once."""

from __future__ import annotations

import threading

import pytest
from conftest import call

pytestmark = pytest.mark.anyio
matplotlib = pytest.importorskip("matplotlib")


async def test_a_long_session_of_plotting_calls_loads_matplotlibs_fonts_once(
    zoo_client, monkeypatch
):
    from matplotlib import font_manager
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    drawn_on: list[int] = []  # the thread of each figure drawn (the test's own witness)
    draw = FigureCanvasAgg.draw

    def witnessed_draw(self, *args, **kwargs):
        drawn_on.append(threading.get_ident())
        return draw(self, *args, **kwargs)

    monkeypatch.setattr(FigureCanvasAgg, "draw", witnessed_draw)
    fonts_after_round: list[int] = []
    for _ in range(4):
        # an error histogram drawn after the reply, and a sweep plot the call awaits
        await call(zoo_client, "check_numerics", kernel="vector_add")
        bench = await call(
            zoo_client, "microbench", kernel="vector_add", shapes=[{"N": 64}, {"N": 256}]
        )
        assert any(u.endswith("/microbench_sweep.png") for u in bench["artifacts"]), bench
        await call(zoo_client, "list_kernels")  # waits for the late histogram
        fonts_after_round.append(font_manager._get_font.cache_info().currsize)
    assert len(drawn_on) >= 8, drawn_on
    # one drawing thread, so the font cache (the native memory it holds) stops growing
    assert len(set(drawn_on)) == 1, f"plots drawn on {len(set(drawn_on))} threads"
    assert fonts_after_round[-1] == fonts_after_round[0], fonts_after_round
