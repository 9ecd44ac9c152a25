"""Who the user is and what they may spend: password login (throttled), OpenID Connect
sign-in, login sessions that can be ended, and each user's limits.
"""
