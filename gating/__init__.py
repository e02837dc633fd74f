"""Advantage estimators, the VeriGate gate and collapse monitors (pure tensor functions)."""
