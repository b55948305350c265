"""Black-box tests: the official openai and anthropic SDKs against a running
Sluice gateway (started by sdk_integration_test.go on the real Kafka broker).

Environment: SLUICE_BASE_URL (gateway root), SLUICE_API_KEY (a demo key),
SLUICE_LIMITED_KEY (a key whose ledger budget is one request).
"""
import os

import anthropic
import openai
import pytest

BASE = os.environ["SLUICE_BASE_URL"]
KEY = os.environ["SLUICE_API_KEY"]
LIMITED = os.environ["SLUICE_LIMITED_KEY"]
MESSAGES = [{"role": "user", "content": "Say hello to Sluice."}]


@pytest.fixture
def oai():
    return openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture
def claude():
    return anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)


def test_chat_completion(oai):
    r = oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=16)
    assert r.object == "chat.completion"
    assert r.choices[0].message.content
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0


def test_chat_completion_streaming(oai):
    chunks = list(oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=16, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    # The gateway forces usage upstream to reconcile, but the client did not
    # ask for it: no usage-only chunk reaches the SDK.
    assert all(c.choices for c in chunks)


def test_chat_completion_streaming_with_usage(oai):
    chunks = list(oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=16, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_embeddings(oai):
    r = oai.embeddings.create(model="text-embedding-3-small", input=["alpha", "beta"])
    assert len(r.data) == 2 and len(r.data[0].embedding) > 0
    assert r.usage.prompt_tokens > 0


def test_models(oai):
    ids = [m.id for m in oai.models.list()]
    assert "gpt-4o-mini" in ids


def test_model_retrieve(oai, claude):
    m = oai.models.retrieve("gpt-4o-mini")
    assert m.id == "gpt-4o-mini" and m.object == "model"
    assert claude.models.retrieve("claude-sonnet-4-5").id == "claude-sonnet-4-5"
    with pytest.raises(openai.NotFoundError) as ei:
        oai.models.retrieve("gpt-9")
    assert ei.value.body["code"] == "model_not_found"


def test_unknown_key_is_401():
    c = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-not-a-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as ei:
        c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert ei.value.status_code == 401
    assert ei.value.body["code"] == "invalid_api_key"


def test_local_429_is_readable():
    c = openai.OpenAI(base_url=BASE + "/v1", api_key=LIMITED, max_retries=0)
    c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=4)  # the key's one request
    with pytest.raises(openai.RateLimitError) as ei:
        c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=4)
    e = ei.value
    assert e.status_code == 429
    sluice = e.body["sluice"]
    assert sluice["gateway_decision"] in ("rejected_locally", "queued_then_expired")
    assert sluice["type"] == "local_limit"
    assert sluice["tenant"] == "demo" and sluice["request_id"]
    assert e.response.headers.get("retry-after") or e.body["code"] == "queue_timeout"


def test_bad_request_is_400(oai):
    with pytest.raises(openai.BadRequestError) as ei:
        oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=-5)
    assert ei.value.body["code"] == "invalid_value" and ei.value.body["param"] == "max_tokens"


def test_unknown_model_is_404(oai):
    with pytest.raises(openai.NotFoundError) as ei:
        oai.chat.completions.create(model="gpt-9", messages=MESSAGES)
    assert ei.value.body["code"] == "model_not_found"


def test_anthropic_message(claude):
    r = claude.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=MESSAGES)
    assert r.type == "message" and r.content[0].text
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0


def test_anthropic_message_streaming(claude):
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=16, messages=MESSAGES) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text
    assert final.usage.output_tokens > 0


def test_anthropic_count_tokens(claude):
    # The gateway's estimate, with no upstream call: what a message with the
    # same prompt reserves.
    n = claude.messages.count_tokens(model="claude-sonnet-4-5", messages=MESSAGES).input_tokens
    assert n > 0
    longer = claude.messages.count_tokens(model="claude-sonnet-4-5", messages=MESSAGES * 4).input_tokens
    assert longer > n


def test_anthropic_error_shape():
    c = anthropic.Anthropic(base_url=BASE, api_key="sk-not-a-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as ei:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=MESSAGES)
    body = ei.value.body
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert body["error"]["code"] == "invalid_api_key"
