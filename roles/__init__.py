"""pyinfra deploy functions, one concern per module; the logic they apply lives in sglang_deploy/."""
