package sim

import (
	"encoding/json"
	"fmt"
)

// Anthropic Messages: what the simulator checks of a request and how it
// answers one with tools. The checks are the ones the real API makes of
// the shapes a translator gets wrong (roles, block types, empty text,
// tool results that answer no tool_use, tools without an object
// input_schema), so that a gateway translating chat completions to
// Messages is held to them.

// anthropicBlockTypes are the content block types a request may hold.
var anthropicBlockTypes = map[string]bool{
	"text": true, "image": true, "document": true, "tool_use": true, "tool_result": true,
	"thinking": true, "redacted_thinking": true, "search_result": true,
}

// checkAnthropicRequest returns the first problem of a Messages request's
// system, messages and tools, worded as Anthropic's invalid_request_error
// ("" = none).
func checkAnthropicRequest(body map[string]any) string {
	switch sys := body["system"].(type) {
	case nil, string:
	case []any:
		for i, b := range sys {
			bm, _ := b.(map[string]any)
			if bm["type"] != "text" {
				return fmt.Sprintf("system.%d.type: Input should be 'text'", i)
			}
			if t, _ := bm["text"].(string); t == "" {
				return fmt.Sprintf("system.%d.text: text content blocks must be non-empty", i)
			}
		}
	default:
		return "system: Input should be a valid string or list"
	}
	msgs, _ := body["messages"].([]any)
	var lastToolUses map[string]bool // the previous assistant turn's tool_use ids
	for i, m := range msgs {
		mm, _ := m.(map[string]any)
		role, _ := mm["role"].(string)
		if role != "user" && role != "assistant" {
			return fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		uses := map[string]bool{}
		switch c := mm["content"].(type) {
		case string:
			if c == "" && (role == "user" || i < len(msgs)-1) {
				return fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
			}
		case []any:
			for j, b := range c {
				if p := checkAnthropicBlock(b, role, lastToolUses, uses); p != "" {
					return fmt.Sprintf("messages.%d.content.%d: %s", i, j, p)
				}
			}
		default:
			return fmt.Sprintf("messages.%d.content: Input should be a valid string or list", i)
		}
		if role == "assistant" {
			lastToolUses = uses
		} else {
			lastToolUses = nil
		}
	}
	tools, _ := body["tools"].([]any)
	for i, t := range tools {
		tm, _ := t.(map[string]any)
		if typ, _ := tm["type"].(string); typ != "" && typ != "custom" {
			continue // server tools (web_search_…) have no schema
		}
		if n, _ := tm["name"].(string); n == "" {
			return fmt.Sprintf("tools.%d.name: Field required", i)
		}
		schema, _ := tm["input_schema"].(map[string]any)
		if schema == nil || schema["type"] != "object" {
			return fmt.Sprintf("tools.%d.input_schema.type: Input should be 'object'", i)
		}
	}
	return ""
}

// checkAnthropicBlock checks one content block of a message of role;
// prev are the tool_use ids a tool_result may answer, uses collects this
// message's tool_use ids.
func checkAnthropicBlock(b any, role string, prev, uses map[string]bool) string {
	bm, _ := b.(map[string]any)
	typ, _ := bm["type"].(string)
	if !anthropicBlockTypes[typ] {
		return fmt.Sprintf("type: Input tag '%s' found using 'type' does not match any of the expected tags", typ)
	}
	switch typ {
	case "text":
		if t, _ := bm["text"].(string); t == "" {
			return "text content blocks must be non-empty"
		}
	case "tool_use":
		id, _ := bm["id"].(string)
		name, _ := bm["name"].(string)
		if _, ok := bm["input"].(map[string]any); !ok || id == "" || name == "" {
			return "tool_use blocks need an id, a name and an object input"
		}
		if role != "assistant" {
			return "tool_use blocks may only appear in assistant messages"
		}
		uses[id] = true
	case "tool_result":
		id, _ := bm["tool_use_id"].(string)
		if role != "user" {
			return "tool_result blocks may only appear in user messages"
		}
		if !prev[id] {
			return fmt.Sprintf("unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", id)
		}
	case "image":
		src, _ := bm["source"].(map[string]any)
		if st, _ := src["type"].(string); st != "base64" && st != "url" {
			return "image.source.type: Input should be 'base64' or 'url'"
		}
	}
	return ""
}

// anthropicTool is the tool a Messages answer calls, or nil: tool_choice
// none calls none; {type: tool, name} calls that one; any calls the first;
// auto (or no choice) calls the first unless the conversation ends with a
// tool result, which it answers in text (so that a tool loop ends).
func anthropicTool(body map[string]any) *toolDef {
	var tools []toolDef
	list, _ := body["tools"].([]any)
	for _, t := range list {
		tm, _ := t.(map[string]any)
		if name, _ := tm["name"].(string); name != "" && tm["input_schema"] != nil {
			tools = append(tools, toolDef{name: name, params: tm["input_schema"]})
		}
	}
	if len(tools) == 0 {
		return nil
	}
	tc, _ := body["tool_choice"].(map[string]any)
	switch tc["type"] {
	case "none":
		return nil
	case "tool":
		for i := range tools {
			if tools[i].name == tc["name"] {
				return &tools[i]
			}
		}
		return &tools[0]
	case "any":
		return &tools[0]
	}
	if endsWithToolResult(body) {
		return nil
	}
	return &tools[0]
}

// endsWithToolResult: the last message is a user turn holding a
// tool_result block.
func endsWithToolResult(body map[string]any) bool {
	msgs, _ := body["messages"].([]any)
	if len(msgs) == 0 {
		return false
	}
	last, _ := msgs[len(msgs)-1].(map[string]any)
	blocks, _ := last["content"].([]any)
	for _, b := range blocks {
		if bm, _ := b.(map[string]any); bm["type"] == "tool_result" {
			return true
		}
	}
	return false
}

// anthropicAnswer plans a Messages answer: a tool_use block (input
// generated from the tool's input_schema, as long as its JSON) or the
// drawn output of filler text.
func anthropicAnswer(body map[string]any, drawn int64, truncated bool) answer {
	if t := anthropicTool(body); t != nil {
		args, _ := json.Marshal(genJSON(t.params))
		return answer{tool: &toolCall{name: t.name, arguments: string(args)}, tokens: max(1, ceilDiv4(int64(len(args))))}
	}
	return answer{text: outputText(0, drawn), tokens: drawn, truncated: truncated, filler: true}
}
