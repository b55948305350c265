"""Black-box tests: chat completions and the Responses API to Claude with the
pinned openai SDK.
The gateway translates each chat completion to Anthropic Messages, sends it
to the simulator's Anthropic dialect (which refuses what the real API
refuses: system roles in messages, empty text, tool results without their
tool_use, …) and translates the message or its SSE events back.

Environment: SLUICE_BASE_URL (gateway root), SLUICE_API_KEY (a demo key).
"""
import json
import os

import openai
import pydantic
import pytest

BASE = os.environ["SLUICE_BASE_URL"]
KEY = os.environ["SLUICE_API_KEY"]
CLAUDE = "claude-sonnet-4-5"  # routed to the simulator's Anthropic dialect
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather in Oslo?"}]
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
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": WEATHER}}]


class Forecast(pydantic.BaseModel):
    city: str
    high_celsius: float
    sunny: bool


@pytest.fixture
def oai():
    return openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0)


def check_weather(args):
    assert set(args) == {"city", "unit", "days"}
    assert isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit")
    assert isinstance(args["days"], int) and args["days"] >= 1


def test_claude_chat(oai):
    r = oai.chat.completions.create(model=CLAUDE, messages=MESSAGES, max_tokens=16, temperature=0.2, stop=["END"])
    assert r.object == "chat.completion" and r.model == CLAUDE
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content and c.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 0 and u.completion_tokens > 0 and u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_claude_chat_developer_role(oai):
    # max_completion_tokens is Anthropic's max_tokens (without either the
    # translation sends the route's default_max_output_tokens; a long
    # answer here would spend the simulator's output budget the other
    # tests need).
    r = oai.chat.completions.create(model=CLAUDE, max_completion_tokens=16,
                                    messages=[{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hello"}])
    assert r.choices[0].message.content


def test_claude_chat_streaming(oai):
    chunks = list(oai.chat.completions.create(model=CLAUDE, messages=MESSAGES, max_tokens=16, stream=True))
    assert all(c.object == "chat.completion.chunk" and c.choices for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_claude_chat_streaming_with_usage(oai):
    chunks = list(oai.chat.completions.create(model=CLAUDE, messages=MESSAGES, max_tokens=16, stream=True,
                                              stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage.prompt_tokens > 0 and last.usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_claude_chat_tools(oai):
    r = oai.chat.completions.create(model=CLAUDE, messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=256)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    check_weather(json.loads(call.function.arguments))
    # The tool's result goes back as a tool message (a tool_result block
    # upstream), and the model answers in text.
    history = MESSAGES + [c.message.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"high": 4, "sky": "snow"})}]
    r2 = oai.chat.completions.create(model=CLAUDE, messages=history, tools=TOOLS, max_tokens=32)
    assert r2.choices[0].finish_reason in ("stop", "length") and r2.choices[0].message.content


def test_claude_chat_tools_streaming(oai):
    chunks = list(oai.chat.completions.create(model=CLAUDE, messages=MESSAGES, tools=TOOLS, max_tokens=256, stream=True))
    deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function.name == "get_weather" and all(d.index == 0 for d in deltas)
    check_weather(json.loads("".join(d.function.arguments or "" for d in deltas)))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # The SDK's stream helper assembles the same call.
    with oai.chat.completions.stream(model=CLAUDE, messages=MESSAGES, tools=TOOLS, max_tokens=256) as s:
        final = s.get_final_completion()
    check_weather(json.loads(final.choices[0].message.tool_calls[0].function.arguments))


def test_claude_chat_json_schema(oai):
    r = oai.chat.completions.create(model=CLAUDE, messages=MESSAGES, max_tokens=256, response_format={
        "type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER, "strict": True}})
    assert r.choices[0].finish_reason == "stop"
    check_weather(json.loads(r.choices[0].message.content))
    parsed = oai.chat.completions.parse(model=CLAUDE, messages=MESSAGES, max_tokens=256, response_format=Forecast)
    assert isinstance(parsed.choices[0].message.parsed, Forecast)


def test_claude_chat_refuses_what_does_not_translate(oai):
    with pytest.raises(openai.BadRequestError) as ei:
        oai.chat.completions.create(model=CLAUDE, messages=MESSAGES, max_tokens=8, n=2, logprobs=True)
    body = ei.value.body
    assert ei.value.status_code == 400 and body["code"] == "unsupported_api" and body["param"] == "model"
    assert "n > 1" in body["message"] and "logprobs" in body["message"]


# The Responses API to Claude: the same translation, answered as a response
# object or as the Responses events.

def test_claude_responses(oai):
    r = oai.responses.create(model=CLAUDE, instructions="Be brief.", input="Say hello to Sluice.", max_output_tokens=16)
    assert r.object == "response" and r.status in ("completed", "incomplete") and r.output_text
    u = r.usage
    assert u.input_tokens > 0 and u.output_tokens > 0 and u.total_tokens == u.input_tokens + u.output_tokens


def test_claude_responses_streaming(oai):
    events = list(oai.responses.create(model=CLAUDE, input="Count to five.", max_output_tokens=16, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and "response.output_text.delta" in types
    assert types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == final.output_text
    assert final.usage.output_tokens > 0
    with oai.responses.stream(model=CLAUDE, input="Hi!", max_output_tokens=16) as s:
        for _ in s:
            pass
        assert s.get_final_response().output_text


def test_claude_responses_tools(oai):
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True}]
    r = oai.responses.create(model=CLAUDE, input="Weather in Oslo?", tools=tools, tool_choice="required", max_output_tokens=256)
    call = [o for o in r.output if o.type == "function_call"][0]
    assert call.name == "get_weather" and call.call_id
    check_weather(json.loads(call.arguments))
    # The call and its output go back as input items; the model answers.
    r2 = oai.responses.create(model=CLAUDE, tools=tools, max_output_tokens=32, input=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "snow"}])
    assert r2.output_text
    # Streamed: the arguments arrive as function_call_arguments deltas.
    events = list(oai.responses.create(model=CLAUDE, input="Weather in Oslo?", tools=tools, max_output_tokens=256, stream=True))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    check_weather(json.loads(args))


def test_claude_responses_structured_output(oai):
    r = oai.responses.parse(model=CLAUDE, input="Forecast for Oslo", text_format=Forecast, max_output_tokens=256)
    assert isinstance(r.output_parsed, Forecast)


def test_claude_responses_refuses_what_does_not_translate(oai):
    with pytest.raises(openai.BadRequestError) as ei:
        oai.responses.create(model=CLAUDE, input="hi", previous_response_id="resp_123", max_output_tokens=8)
    assert ei.value.body["code"] == "unsupported_api" and "previous_response_id" in ei.value.body["message"]
