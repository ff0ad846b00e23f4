"""Tests of stack."""
