"""What the chat adds to Chainlit's web server, or mends in it: headers and the page's policy,
allowed origins, uploads and the files it serves, session ids, cookies, routes and tasks.

None of it knows about the model or the conversation; only the texts are below it.
"""
