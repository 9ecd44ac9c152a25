"""The app's own pages beside the chat: the admin's figures (/admin), the presenters' live
view (/live) and a shared chat's read-only page (/shared/<token>), with its link and QR code.
"""
