"""The red-team suite: each promise of issue 34 attacked the way a prompt injection would."""
