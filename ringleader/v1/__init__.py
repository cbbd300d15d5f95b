"""Generated gRPC stubs for package ringleader.v1 (scripts/genproto.py); do not edit."""
