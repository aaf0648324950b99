"""Links and uploads from strangers, driven headless with AppTest: a link holds catalog ids and the
walkthrough's stage, a hostile link is a notice naming the parameter, the value and what was used
instead (never a traceback), an old label-style link still opens, an upload is bounded and its error
is plain text, and an exception no view expected is a short message with an id."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


def opened(link: dict, page: str | None = None) -> AppTest:
    """The app as a person opening `link` (query parameters) sees it."""
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    for k, v in link.items():
        at.query_params[k] = v
    if page:
        at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def notices(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if "The link" in w.value]


@pytest.mark.parametrize("seed", ["inf", "-inf", "Infinity", "1e400", "nan"])
def test_a_link_with_seed_inf_is_a_notice_not_a_traceback(seed):
    # it replaced every page with a traceback that showed server paths
    at = opened({"seed": seed})
    (note,) = notices(at)
    assert f"seed={seed}" in note and "0 to 10,000" in note and "0 (the default)" in note
    assert at.session_state["seed"] == 0
    assert any(h.value.startswith("Recommended shape") for h in at.subheader)  # the Lab itself answers
    assert "seed" not in at.query_params


def test_hand_edited_bad_values_name_the_parameter_the_value_and_what_was_used():
    at = opened({"rate": "abc", "gpus": "500", "model": "gpt-9", "prompt": "-5", "cb": "maybe", "dtype": "fp3"})
    text = " ".join(notices(at))
    for said in ("rate=abc", "4 (the default)", "gpus=500", "64 (the nearest)", "model=gpt-9", "llama-3.1-8b (the default)",
                 "prompt=-5", "512 (the default)", "cb=maybe", "true or false", "dtype=fp3", "bf16, fp8"):
        assert said in text, said
    ss = at.session_state
    assert (ss["rate"], ss["gpus"], ss["model"], ss["prompt"], ss["cb"], ss["dtype"]) == \
        (4.0, 64, "llama-3.1-8b", 512, True, "bf16")
    assert dict(at.query_params) == {"gpus": "64"}  # what the Lab used, not what it was given


def test_a_link_holds_catalog_ids_not_labels():
    at = opened({})
    at.session_state["advanced"] = True  # the Advanced knobs are drawn only while their section is open
    at.run()
    at.sidebar.selectbox(key="model").set_value("llama-3.1-405b")
    at.sidebar.selectbox(key="gpu").set_value("h200")
    at.sidebar.selectbox(key="router").set_value("rr")
    at.run()
    assert at.query_params["model"] == "llama-3.1-405b" and at.query_params["gpu"] == "h200"
    assert at.query_params["router"] == "rr"
    # and such a link opens the same inputs, without a notice
    again = opened({"model": "llama-3.1-405b", "gpu": "h200", "router": "rr", "tp_on": "true", "gpus": "16"})
    assert not notices(again)
    assert (again.session_state["model"], again.session_state["gpu"], again.session_state["tp_on"]) == \
        ("llama-3.1-405b", "h200", True)


def test_old_label_style_links_still_open():
    # before links held ids, Streamlit wrote the options' display labels into the URL
    at = opened({"model": "Llama-3.1-70B (71B)", "gpu": "NVIDIA H200 SXM 141GB (141 GiB)",
                 "router": "round robin", "tp": "auto (the planner's choice)", "gpus": "4", "tp_on": "true"})
    assert not notices(at)
    assert (at.session_state["model"], at.session_state["gpu"], at.session_state["router"]) == \
        ("llama-3.1-70b", "h200", "rr")
    assert at.query_params["model"] == "llama-3.1-70b" and at.query_params["gpu"] == "h200"


def test_the_model_size_slider_is_linked_by_its_parametric_id():
    at = opened({"model": "dense-34b"})
    assert at.session_state["model"] == "Custom size (slider)" and at.session_state["size_b"] == 34
    assert at.query_params["model"] == "dense-34b" and "size_b" not in at.query_params


def test_the_walkthroughs_stage_is_in_the_link():
    at = opened({"stage": "3"}, "views/walkthrough.py")
    assert at.header[0].value.startswith("Stage 3")
    assert at.query_params["stage"] == "3"
    next(b for b in at.button if b.label == "Next").click().run()
    assert at.header[0].value.startswith("Stage 4") and at.query_params["stage"] == "4"
    bad = opened({"stage": "9"}, "views/walkthrough.py")
    assert "stage=9" in " ".join(notices(bad)) and bad.header[0].value.startswith("Stage 5")


def test_an_unexpected_exception_is_a_short_message_with_an_id(monkeypatch, capfd):
    import ui.cache

    def broken(*a, **k):
        raise KeyError("a bug no view catches")

    monkeypatch.setattr(ui.cache, "lab_view", broken)
    at = opened({})
    (err,) = [e.value for e in at.error if "unexpected error" in e.value]
    ref = err.split("(id ")[1][:8]
    assert "KeyError" not in err and "Traceback" not in err and "/" not in err.split("(id")[0]
    logged = capfd.readouterr().err
    assert f"unexpected error {ref}" in logged and "a bug no view catches" in logged  # the trace, in the server log


def upload(at: AppTest, content: bytes) -> AppTest:
    (uploader,) = [u for u in at.sidebar.file_uploader if "trace" in u.key]
    uploader.set_value(("trace.csv", content, "text/csv"))
    at.run()
    assert not at.exception, at.exception
    return at


HEADER = b"arrival_s,prompt_tokens,output_tokens\n"


def test_the_trace_uploader_states_its_limits_and_matches_the_servers():
    at = opened({})
    (uploader,) = [u for u in at.sidebar.file_uploader if "trace" in u.key]
    assert "200,000 requests" in uploader.label and "8 MB" in uploader.label
    config = (ROOT / ".streamlit" / "config.toml").read_text()
    from math import ceil
    from core.serving import benchfile
    # the server's limit is the largest uploader's own (Your benchmark's parser), in Streamlit's MiB
    assert f"maxUploadSize = {ceil(benchfile.MAX_BYTES / 1024**2)}" in config


@pytest.mark.parametrize("content,line", [
    (HEADER + b"0,10,5\n1,1\r0,5\n", 3),
    (HEADER + b"0,10," + b"5" * 131_073 + b"\n", 2),
    (HEADER + b"0,9223372036854775808,5\n", 2),
    (HEADER + b"0,10,5\n1e300,10,5\n", 3),
])
def test_a_malformed_upload_answers_with_its_line(content, line):
    at = upload(opened({}), content)
    said = [c.value for c in at.sidebar.caption if "cannot be replayed" in c.value]
    assert said and f"line {line}:" in said[0]
    assert any(f"line {line}:" in e.value for e in at.error)  # the page says it too, as an error


def test_an_uploads_error_is_plain_text_never_markdown():
    # an image link in a shared CSV made the browser fetch an outside URL
    at = upload(opened({}), HEADER + b"0,![x](http://example.com/x.png),5\n")
    (said,) = [c.value for c in at.sidebar.caption if "cannot be replayed" in c.value]
    body = said.split("replayed: ", 1)[1]
    assert body.startswith("`") and body.endswith("`") and "![x](http://example.com/x.png)" in body  # a code span


def test_a_trace_beyond_the_models_context_is_a_message_on_the_tutorial():
    at = opened({}, "views/tutorial.py")
    upload(at, HEADER + b"0,200000,5000\n")
    assert any("context" in e.value for e in at.error)


@pytest.mark.parametrize("page", ["views/walkthrough.py", "views/tutorial.py", "views/lab.py"])
def test_a_trace_within_the_context_runs_whatever_the_length_sliders_say(page):
    # the sliders' lengths are beyond Mistral-7B's 32,768-token context, the replayed trace's are not:
    # the trace replaces them (a 8,000-set fuzz found the walkthrough's and the tutorial's one-request
    # figures still reading the sliders, and stopping on the context)
    at = opened({}, page)
    at.session_state["model"], at.session_state["prompt"], at.session_state["output"] = "mistral-7b", 65536, 512
    upload(at, HEADER + b"0,1000,100\n0.5,3000,300\n")
    assert not [e.value for e in at.error if "unexpected error" in e.value or "context" in e.value]


def test_a_link_to_a_closed_loop_opens_it_on_every_view_and_keeps_it():
    link = {"load": "users", "users": "32", "think": "2"}
    at = opened(link)
    assert not notices(at)
    said = " ".join(i.value for i in at.info)
    assert "32 users in a closed loop, thinking 2 s (fixed) between requests" in said
    assert "Concurrent users" in [s.label for s in at.sidebar.select_slider]
    assert "Request rate (req/s)" not in [s.label for s in at.sidebar.number_input]  # the rate is not the load now
    assert {k: at.query_params[k] for k in link} == link  # written back: the link still says it
    for page, words in (("views/bottlenecks.py", "32 users in a closed loop"),
                        ("views/tradeoffs.py", "32 users in a closed loop")):
        at.switch_page(page).run()
        assert not at.exception, page
        text = " ".join([i.value for i in at.info] + [c.value for c in at.caption])
        assert words in text, page
    at = opened({"load": "crowd", "users": "5"})
    assert any("load=crowd" in n and "rate (the default)" in n for n in notices(at))
    assert any("users=5" in n and "4 (the nearest)" in n for n in notices(at))


def test_every_link_the_readme_gives_opens_with_figures():
    import re
    text = (ROOT / "README.md").read_text()
    links = set(re.findall(r"`/?((?:walkthrough)?\?[a-z_]+=[^` ]+)`", text))
    assert len(links) >= 5
    for link in sorted(links):
        page, _, query = link.partition("?")
        params = dict(p.split("=", 1) for p in query.split("&"))
        at = opened(params, "views/walkthrough.py" if page == "walkthrough" else None)
        # a walkthrough stage may miss the targets (a red verdict on its figures); nothing may fail to run
        failed = [e.value for e in at.error if not e.value.startswith("Misses the targets")]
        assert not failed, (link, failed)
        assert any("TTFT" in m.label for m in at.metric), link
