"""write"""
