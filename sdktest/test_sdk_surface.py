"""Black-box tests of the rest of the API surface with the pinned SDKs: the
Responses API (plain and streamed, usage with reasoning tokens), legacy
completions, chat with several choices, tool calls and structured output
(json_schema). Every answer comes from the provider simulator through the
gateway's estimate → reserve → reconcile path.

Environment: SLUICE_BASE_URL (gateway root), SLUICE_API_KEY (a demo key).
"""
import json
import os

import openai
import pydantic
import pytest

BASE = os.environ["SLUICE_BASE_URL"]
KEY = os.environ["SLUICE_API_KEY"]
MESSAGES = [{"role": "user", "content": "What is the weather in Oslo?"}]
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}


class Forecast(pydantic.BaseModel):
    city: str
    high_celsius: float
    sunny: bool
    hours: list[int]


@pytest.fixture
def oai():
    return openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0)


def check_weather(args):
    assert set(args) == {"city", "unit", "days"}
    assert isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit")
    assert isinstance(args["days"], int) and args["days"] >= 1


def test_responses_create(oai):
    r = oai.responses.create(model="o4-mini", instructions="Be brief.", input="Say hello to Sluice.", max_output_tokens=64)
    assert r.object == "response" and r.status in ("completed", "incomplete")
    assert r.output_text
    u = r.usage
    assert u.input_tokens > 0 and u.output_tokens > 0 and u.total_tokens == u.input_tokens + u.output_tokens
    assert 0 < u.output_tokens_details.reasoning_tokens < u.output_tokens


def test_responses_input_tokens(oai):
    # The gateway's estimate, with no upstream call: what a response with the
    # same input reserves.
    n = oai.responses.input_tokens.count(model="gpt-4o-mini", input="Say hello to Sluice.").input_tokens
    more = oai.responses.input_tokens.count(model="gpt-4o-mini", instructions="Be brief.", input="Say hello to Sluice.").input_tokens
    assert 0 < n < more


def test_responses_input_items(oai):
    r = oai.responses.create(model="gpt-4o-mini", max_output_tokens=32, input=[
        {"role": "developer", "content": "Answer in one word."},
        {"role": "user", "content": [{"type": "input_text", "text": "Colour of the sky?"}]},
    ])
    assert r.output_text and r.usage.output_tokens_details.reasoning_tokens == 0


def test_responses_streaming(oai):
    events = list(oai.responses.create(model="o4-mini", input="Count to five.", max_output_tokens=64, stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and "response.output_text.delta" in types
    assert types[-1] in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text and text == final.output_text
    assert final.usage.output_tokens > 0 and final.usage.output_tokens_details.reasoning_tokens > 0
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_stream_helper(oai):
    with oai.responses.stream(model="gpt-4o-mini", input="Hi!", max_output_tokens=24) as s:
        for _ in s:
            pass
        final = s.get_final_response()
    assert final.output_text and final.usage.output_tokens > 0


def test_responses_tool_call(oai):
    r = oai.responses.create(model="gpt-4o-mini", input="Weather in Oslo?", tools=[
        {"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True}])
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    check_weather(json.loads(calls[0].arguments))


def test_responses_structured_output(oai):
    r = oai.responses.parse(model="gpt-4o-mini", input="Forecast for Oslo", text_format=Forecast)
    assert isinstance(r.output_parsed, Forecast)


def test_completions(oai):
    r = oai.completions.create(model="gpt-3.5-turbo-instruct", prompt="Say this is a test", max_tokens=8)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 8
    two = oai.completions.create(model="gpt-3.5-turbo-instruct", prompt=["a", "b"], max_tokens=4, n=2)
    assert sorted(c.index for c in two.choices) == [0, 1, 2, 3]


def test_completions_streaming(oai):
    chunks = list(oai.completions.create(model="gpt-3.5-turbo-instruct", prompt="Once", max_tokens=8, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    # The gateway forced usage upstream to reconcile; the client did not ask.
    assert all(c.choices for c in chunks)
    with_usage = list(oai.completions.create(model="gpt-3.5-turbo-instruct", prompt="Once", max_tokens=8, stream=True,
                                             stream_options={"include_usage": True}))
    assert with_usage[-1].usage is not None and with_usage[-1].usage.completion_tokens > 0


def test_chat_n_choices(oai):
    r = oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=8, n=2)
    assert len(r.choices) == 2 and {c.index for c in r.choices} == {0, 1}
    assert all(c.message.content for c in r.choices)


def test_chat_tool_call(oai):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER, "strict": True}}]
    r = oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, tools=tools)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.tool_calls[0].function.name == "get_weather"
    check_weather(json.loads(c.message.tool_calls[0].function.arguments))
    # Streamed: the arguments arrive in pieces that join to the same JSON.
    args = "".join(ch.choices[0].delta.tool_calls[0].function.arguments or ""
                   for ch in oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, tools=tools, stream=True)
                   if ch.choices and ch.choices[0].delta.tool_calls)
    check_weather(json.loads(args))


def test_chat_json_schema(oai):
    r = oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, response_format={
        "type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER, "strict": True}})
    check_weather(json.loads(r.choices[0].message.content))
    parsed = oai.chat.completions.parse(model="gpt-4o-mini", messages=MESSAGES, response_format=Forecast)
    assert isinstance(parsed.choices[0].message.parsed, Forecast)
