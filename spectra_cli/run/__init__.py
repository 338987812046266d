"""The orchestrators: one module per command family, each a typed library function that
opens its input once, runs its passes and analyses, and returns a frozen result."""
