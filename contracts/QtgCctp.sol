// SPDX-License-Identifier: Apache-2.0
// CCTP-shaped contracts for qtg's bridge tests and demo (issue "Bridging for real"): a USDC-like
// token per chain, a message transmitter whose receiveMessage checks the attester's signature
// over the message and refuses a used nonce, and a token messenger whose depositForBurn burns
// and emits the message. Function, event and message shapes follow Circle's CCTP (v1), so the
// lane talks to the real contracts by configuration only. Compiled with solc 0.8.28 (npm
// `solc`, pinned in scripts/ensure-evm-tools.sh); QtgCctp_sol_*.bin are the committed bytecode,
// checked against a fresh compile by the tests.
pragma solidity 0.8.28;

/// A USDC-like token: 6 decimals; the owner names minters (the token messenger).
contract QtgUsdc {
    string public constant name = "USD Coin (qtg test)";
    string public constant symbol = "USDC";
    uint8 public constant decimals = 6;
    uint256 public totalSupply;
    address public owner;
    mapping(address => bool) public minters;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event MinterConfigured(address indexed minter, bool enabled);

    constructor(uint256 supply) {
        owner = msg.sender;
        totalSupply = supply;
        balanceOf[msg.sender] = supply;
        emit Transfer(address(0), msg.sender, supply);
    }

    function configureMinter(address minter, bool enabled) external {
        require(msg.sender == owner, "owner");
        minters[minter] = enabled;
        emit MinterConfigured(minter, enabled);
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        require(allowed >= value, "allowance");
        if (allowed != type(uint256).max) {
            allowance[from][msg.sender] = allowed - value;
        }
        _move(from, to, value);
        return true;
    }

    function mint(address to, uint256 amount) external returns (bool) {
        require(minters[msg.sender], "minter");
        require(to != address(0), "zero address");
        totalSupply += amount;
        balanceOf[to] += amount;
        emit Transfer(address(0), to, amount);
        return true;
    }

    function burn(uint256 amount) external {
        require(minters[msg.sender], "minter");
        require(balanceOf[msg.sender] >= amount, "balance");
        balanceOf[msg.sender] -= amount;
        totalSupply -= amount;
        emit Transfer(msg.sender, address(0), amount);
    }

    function _move(address from, address to, uint256 value) private {
        require(to != address(0), "zero address");
        require(balanceOf[from] >= value, "balance");
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}

interface IMessageHandler {
    function handleReceiveMessage(uint32 sourceDomain, bytes32 sender, bytes calldata messageBody) external returns (bool);
}

/// Sends and receives messages: `message = version ‖ sourceDomain ‖ destinationDomain ‖ nonce ‖
/// sender ‖ recipient ‖ destinationCaller ‖ messageBody` (packed: 4, 4, 4, 8, 32, 32, 32 bytes,
/// then the body), as CCTP v1. The attestation is the attester's 65-byte signature over
/// keccak256(message).
contract MessageTransmitter {
    uint32 public immutable localDomain;
    uint32 public constant version = 0;
    address public owner;
    address public attester;
    uint64 public nextAvailableNonce;
    /// keccak256(abi.encodePacked(sourceDomain, nonce)) => 1 once received.
    mapping(bytes32 => uint256) public usedNonces;

    event MessageSent(bytes message);
    event MessageReceived(address indexed caller, uint32 sourceDomain, uint64 indexed nonce, bytes32 sender, bytes messageBody);
    event AttesterEnabled(address indexed attester);

    constructor(uint32 domain, address initialAttester) {
        localDomain = domain;
        owner = msg.sender;
        attester = initialAttester;
        emit AttesterEnabled(initialAttester);
    }

    function enableAttester(address newAttester) external {
        require(msg.sender == owner, "owner");
        attester = newAttester;
        emit AttesterEnabled(newAttester);
    }

    function sendMessageWithCaller(uint32 destinationDomain, bytes32 recipient, bytes32 destinationCaller, bytes calldata messageBody)
        external
        returns (uint64 nonce)
    {
        nonce = nextAvailableNonce;
        nextAvailableNonce = nonce + 1;
        bytes32 sender = bytes32(uint256(uint160(msg.sender)));
        emit MessageSent(abi.encodePacked(version, localDomain, destinationDomain, nonce, sender, recipient, destinationCaller, messageBody));
    }

    function receiveMessage(bytes calldata message, bytes calldata attestation) external returns (bool success) {
        require(message.length >= 116, "message too short");
        require(attestation.length == 65, "attestation length");
        require(_signer(keccak256(message), attestation) == attester, "invalid attestation");
        require(uint32(bytes4(message[0:4])) == version, "version");
        uint32 sourceDomain = uint32(bytes4(message[4:8]));
        require(uint32(bytes4(message[8:12])) == localDomain, "destination domain");
        uint64 nonce = uint64(bytes8(message[12:20]));
        bytes32 sender = bytes32(message[20:52]);
        address recipient = address(uint160(uint256(bytes32(message[52:84]))));
        bytes32 destinationCaller = bytes32(message[84:116]);
        require(destinationCaller == bytes32(0) || destinationCaller == bytes32(uint256(uint160(msg.sender))), "caller");
        bytes32 used = keccak256(abi.encodePacked(sourceDomain, nonce));
        require(usedNonces[used] == 0, "Nonce already used");
        usedNonces[used] = 1;
        bytes calldata body = message[116:];
        require(IMessageHandler(recipient).handleReceiveMessage(sourceDomain, sender, body), "handler");
        emit MessageReceived(msg.sender, sourceDomain, nonce, sender, body);
        return true;
    }

    function _signer(bytes32 digest, bytes calldata sig) private pure returns (address) {
        bytes32 r = bytes32(sig[0:32]);
        bytes32 s = bytes32(sig[32:64]);
        uint8 v = uint8(sig[64]);
        if (v < 27) {
            v += 27;
        }
        return ecrecover(digest, v, r, s);
    }
}

/// Burns on this chain and mints what the remote messengers' messages attest: `burnMessage =
/// version ‖ burnToken ‖ mintRecipient ‖ amount ‖ messageSender` (4, 32, 32, 32, 32 bytes).
contract TokenMessenger is IMessageHandler {
    uint32 public constant messageBodyVersion = 0;
    address public owner;
    MessageTransmitter public immutable localMessageTransmitter;
    QtgUsdc public immutable localToken;
    mapping(uint32 => bytes32) public remoteTokenMessengers;

    event DepositForBurn(
        uint64 indexed nonce,
        address indexed burnToken,
        uint256 amount,
        address indexed depositor,
        bytes32 mintRecipient,
        uint32 destinationDomain,
        bytes32 destinationTokenMessenger,
        bytes32 destinationCaller
    );
    event MintAndWithdraw(address indexed mintRecipient, uint256 amount, address indexed mintToken);
    event RemoteTokenMessengerAdded(uint32 domain, bytes32 tokenMessenger);

    constructor(MessageTransmitter transmitter, QtgUsdc token) {
        owner = msg.sender;
        localMessageTransmitter = transmitter;
        localToken = token;
    }

    function addRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger) external {
        require(msg.sender == owner, "owner");
        remoteTokenMessengers[domain] = tokenMessenger;
        emit RemoteTokenMessengerAdded(domain, tokenMessenger);
    }

    function depositForBurn(uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken)
        external
        returns (uint64 nonce)
    {
        return _burn(amount, destinationDomain, mintRecipient, burnToken, bytes32(0));
    }

    function depositForBurnWithCaller(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller
    ) external returns (uint64 nonce) {
        return _burn(amount, destinationDomain, mintRecipient, burnToken, destinationCaller);
    }

    function handleReceiveMessage(uint32 sourceDomain, bytes32 sender, bytes calldata messageBody) external returns (bool) {
        require(msg.sender == address(localMessageTransmitter), "transmitter");
        require(sender != bytes32(0) && remoteTokenMessengers[sourceDomain] == sender, "remote token messenger");
        require(messageBody.length == 132, "burn message length");
        require(uint32(bytes4(messageBody[0:4])) == messageBodyVersion, "burn message version");
        address mintRecipient = address(uint160(uint256(bytes32(messageBody[36:68]))));
        uint256 amount = uint256(bytes32(messageBody[68:100]));
        localToken.mint(mintRecipient, amount);
        emit MintAndWithdraw(mintRecipient, amount, address(localToken));
        return true;
    }

    function _burn(uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken, bytes32 destinationCaller)
        private
        returns (uint64 nonce)
    {
        require(amount > 0, "amount");
        require(mintRecipient != bytes32(0), "mint recipient");
        require(burnToken == address(localToken), "burn token");
        bytes32 destinationTokenMessenger = remoteTokenMessengers[destinationDomain];
        require(destinationTokenMessenger != bytes32(0), "destination domain");
        require(localToken.transferFrom(msg.sender, address(this), amount), "transferFrom");
        localToken.burn(amount);
        bytes memory body = abi.encodePacked(
            messageBodyVersion, bytes32(uint256(uint160(burnToken))), mintRecipient, amount, bytes32(uint256(uint160(msg.sender)))
        );
        nonce = localMessageTransmitter.sendMessageWithCaller(destinationDomain, destinationTokenMessenger, destinationCaller, body);
        emit DepositForBurn(
            nonce, burnToken, amount, msg.sender, mintRecipient, destinationDomain, destinationTokenMessenger, destinationCaller
        );
    }
}
