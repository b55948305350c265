// Package sdktest holds the black-box tests that drive the gateway with the
// official openai and anthropic Python SDKs (sdk_integration_test.go, build
// tag integration; test_sdk.py; setup.sh installs the pinned SDKs into
// $HOME/.cache/sluice/venv). test_sdk_surface.py drives the Responses API,
// legacy completions, n choices, tool calls and structured output.
// test_sdk_final.py counts the attempts the SDKs make, at their default
// retry settings, for provider errors that can never succeed: exactly one
// each. test_sdk_errors.py runs both SDKs over every error code the stack
// can be made to answer and prints their attempts and wall time (the table
// in docs/gateway.md).
package sdktest
