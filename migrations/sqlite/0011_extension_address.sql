-- Issue 20 §2: the Bitcoin P2PKH address of the key BitGoJS makes at an extensible login; a
-- request to extend that session must carry a message signed by that key.
ALTER TABLE access_tokens ADD COLUMN extension_address TEXT;
