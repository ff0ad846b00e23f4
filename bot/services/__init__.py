"""Use cases: each public function is one thing an operator can ask kimi-ops to do."""
