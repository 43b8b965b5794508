"""Fixture MCP servers (``mcp.server.mcpserver.MCPServer``, the SDK's FastMCP) for the MCP tool tests."""
