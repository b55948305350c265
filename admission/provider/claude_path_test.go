package provider

// The tests' translations of a body to Anthropic Messages go the
// gateway's way, through a Parsed: without the estimator's parse (a
// Parsed with no Request), which is the body decoded afresh;
// TestParsedTranslatesOnce holds the estimator's parse to it.

// claudeWhy lists what of an OpenAI chat body the translation does not
// carry, each naming its field (what Parsed.Unsupported joins).
func claudeWhy(body []byte) []string {
	return (&Parsed{API: APIChat, Body: body}).claudeTranslation().why
}

// claudeResponsesWhy is claudeWhy of a Responses API body.
func claudeResponsesWhy(body []byte) []string {
	return (&Parsed{API: APIResponses, Body: body}).claudeTranslation().why
}

// claudeRequestBody is the Messages body of an OpenAI chat body for
// upstreamModel, defaultMax the route's default output, and whether
// response_format went as a forced tool.
func claudeRequestBody(body []byte, upstreamModel string, defaultMax int64) ([]byte, bool, error) {
	return (&Parsed{API: APIChat, Body: body}).claudeMessages(upstreamModel, defaultMax)
}

// claudeResponsesBody is claudeRequestBody of a Responses API body.
func claudeResponsesBody(body []byte, upstreamModel string, defaultMax int64) ([]byte, bool, error) {
	return (&Parsed{API: APIResponses, Body: body}).claudeMessages(upstreamModel, defaultMax)
}
