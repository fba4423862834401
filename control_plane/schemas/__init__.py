"""Wire models shared by the server and its clients; imports nothing else of ours."""
