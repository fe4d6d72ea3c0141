//! HTTP model providers (OpenAI-compatible, Anthropic, Ollama). Placeholder until the adapters
//! land; nothing outside this folder depends on its contents yet.
