"""Helpers for the contract tests between ``template.yaml`` and the code it deploys."""
