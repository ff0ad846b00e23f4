"""Tests of slack."""
