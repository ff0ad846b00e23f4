"""Tests of sandbox."""
